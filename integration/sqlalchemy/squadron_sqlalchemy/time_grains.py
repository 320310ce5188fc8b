"""SQL that truncates a timestamp column `{col}` to each of Superset's
time grains (ISO 8601 durations, as Superset names them), in DataFusion's
functions. Kept apart from the Superset engine spec so it is tested
without Superset installed."""

TIME_GRAIN_EXPRESSIONS = {
    None: "{col}",
    "PT1S": "date_trunc('second', {col})",
    "PT1M": "date_trunc('minute', {col})",
    "PT1H": "date_trunc('hour', {col})",
    "P1D": "date_trunc('day', {col})",
    # Weeks start on Monday, as ISO 8601 and DataFusion's date_trunc say.
    "P1W": "date_trunc('week', {col})",
    "P1M": "date_trunc('month', {col})",
    "P3M": "date_trunc('quarter', {col})",
    "P1Y": "date_trunc('year', {col})",
}
