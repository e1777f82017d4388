"""Publishing: CommitStep types, CommitSequence and the Committer, the CommitStepStore, and the commit session.

These are commands (renames, fsync, appends, threads); the pure folds they read live in `projections/`.
"""
