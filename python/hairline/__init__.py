"""hairline: catch tiny performance regressions in services before they reach production."""

from hairline.errors import HairlineError

__all__ = ["HairlineError", "__version__"]
__version__ = "0.1.0"
