"""The device runtime's tests; `gfx1250` marks tests that need a real gfx1250 (MI450)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "gfx1250: needs a real gfx1250 GPU with HIP (skipped on the virtual one)")
