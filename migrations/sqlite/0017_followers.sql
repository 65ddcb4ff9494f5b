-- Kept for parity with PostgreSQL (one instance per SQLite file: nobody follows from elsewhere).
ALTER TABLE turns ADD COLUMN followed_until_ms INTEGER NOT NULL DEFAULT 0;
