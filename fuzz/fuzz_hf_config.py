"""atheris harness: the hf_config target of :mod:`targets` (see :mod:`harness`)."""

from harness import main

if __name__ == "__main__":
    main("hf_config")
