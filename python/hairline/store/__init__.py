"""Persistence: the lab's database (SQLAlchemy models, Alembic migrations) and the
observation files (Parquet) the database points to."""
