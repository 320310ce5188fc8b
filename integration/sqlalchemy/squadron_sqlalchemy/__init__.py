"""SQLAlchemy 2 dialect for Squadron: `squadron://host:port` (and the alias
`flightsql://`) over the ADBC Flight SQL driver's DB-API."""

from .dialect import SquadronDialect

__all__ = ["SquadronDialect"]
