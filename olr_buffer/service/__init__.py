"""What the long-running commands need around their work, imported downward by `run`
(the pipeline's service) and `serve` alike: ``config`` (the TOML file of a command's
options), ``logs`` (text or JSON lines), ``metrics_http`` (``/metrics`` and ``/health``
over HTTP), ``metrics`` (the pipeline's Prometheus figures, for `run`) and ``failure``
(the record of the error that stopped `run`, for `status`)."""
