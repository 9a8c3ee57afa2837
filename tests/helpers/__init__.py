"""Shared test code (harnesses, samples, checks), imported as `helpers.X`: tests/ is on
sys.path through [tool.pytest.ini_options] pythonpath in pyproject.toml."""
