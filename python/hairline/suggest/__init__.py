"""DiffSuggester (ServiceLab section 3.1): which functions a diff modifies, what they cost in
production, whether the diff is worth an experiment and which endpoints it should replay.

``diff``: changed lines of ``git diff -M``; ``functions``: each source file's functions with
their qualified names (Python by ``ast``, Go and Rust by tree-sitter) and the diff mapped to
them; ``profile``: folded stacks and pprof files; ``score``: impact per function and per
diff, the endpoints' shares, the threshold and the budget; ``config``: the experiment file's
``[suggest]`` table; ``mix``: the experiment's trace re-mixed to the endpoints.

Nothing is re-exported here: ``config/experiment.py`` imports ``suggest.config``, and this
package's parsers (tree-sitter) must not load with every experiment file.
"""
