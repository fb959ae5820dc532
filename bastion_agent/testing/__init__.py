"""What tests share, for tests and benchmarks only: stub and fault model servers, a throw-away
PostgreSQL, temporary manifests and stores, and one module per fixture (a serve under test, the
fake model, built files). No test imports another test module: a fixture two of them need lives
here. Production code never imports this package.
"""
