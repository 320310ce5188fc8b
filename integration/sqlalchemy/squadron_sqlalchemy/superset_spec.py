"""Apache Superset's engine spec for Squadron: its time grains and
literals. Superset finds it through the `superset.db_engine_specs` entry
point; only Superset imports this module."""

from superset.db_engine_specs.base import BaseEngineSpec

from .time_grains import TIME_GRAIN_EXPRESSIONS


class SquadronEngineSpec(BaseEngineSpec):
    engine = "squadron"
    engine_name = "Squadron"
    default_driver = "adbc"
    sqlalchemy_uri_placeholder = "squadron://user:password@host:50051"
    _time_grain_expressions = TIME_GRAIN_EXPRESSIONS

    @classmethod
    def epoch_to_dttm(cls):
        return "to_timestamp({col})"

    @classmethod
    def convert_dttm(cls, target_type, dttm, db_extra=None):
        kind = target_type.upper()
        if kind == "DATE":
            return f"DATE '{dttm.date().isoformat()}'"
        if kind.startswith("TIMESTAMP"):
            return f"TIMESTAMP '{dttm.isoformat(sep=' ', timespec='microseconds')}'"
        return None
