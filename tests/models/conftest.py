def pytest_configure(config):
    # The Makefile's capped-SIMD passes (NPY_DISABLE_CPU_FEATURES) run -m 'not numerics_free':
    # a module so marked does no floating-point math whose rounding could change an outcome.
    config.addinivalue_line(
        "markers",
        "numerics_free: results cannot depend on numpy's SIMD rounding (strings, bytes, bits)",
    )
