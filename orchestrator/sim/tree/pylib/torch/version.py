__version__ = "2.9.0+rocm7.1.0.sim"
hip = "7.1.25424"
cuda = None
git_version = "0000000000000000000000000000000000000000"
