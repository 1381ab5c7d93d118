"""The lab's build phase: each arm is built once, and its artifact cached by content.

``source``: where an arm's code comes from (a folder or a git revision) and its content hash;
``command``: the build command run in its own process group; ``sandbox``: the bubblewrap
sandbox and limits a submitted experiment's build runs in; ``cache``: the cache key, the
entries and their locks, and :func:`build`, which checks out, runs and publishes.
"""

from hairline.lab.build.cache import BuildResult, BuildSpec, build, build_key
from hairline.lab.build.sandbox import BuildSandbox
from hairline.lab.build.source import EXCLUDED_NAMES, Source, tree_hash

__all__ = [
    "EXCLUDED_NAMES",
    "BuildResult",
    "BuildSandbox",
    "BuildSpec",
    "Source",
    "build",
    "build_key",
    "tree_hash",
]
