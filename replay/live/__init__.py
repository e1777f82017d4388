"""The live projector: one `State` kept current from the log, with HTTP views that say when they are not current.

One module per idea:

- `view`: `LiveView`, the fold thread's commands (begin from the latest snapshot, catch up, follow, save snapshots),
  its `Phase` and its `CatchUp` report.
- `documents`: what the views answer, pure: the CLI's JSON documents (`dataset_doc`, `run_doc`, `sequence_doc`),
  paging and its cursors, and `ViewError`, a request that cannot be answered.
- `metrics`: `/metrics` in the Prometheus text format, pure.
- `server`: the HTTP server: `Answer`, the routes, `make_server`, `open_view` and `serve` (the fold thread beside it).
- `settings`: `LiveSettings`, what `oncelog serve` is told.
- `cli`: the `oncelog serve` command.

This file imports none of them, so the CLI loads without the HTTP server's code.
"""
