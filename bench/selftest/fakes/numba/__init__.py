__version__ = "fake"
