"""Persistence: the service's tables, the engine and sessions, and the database settings.

The one room that knows the schema. It sits below the ledger, the API and the scheduler, and
imports none of them.
"""
