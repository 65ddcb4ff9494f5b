//! The storage layer's one error type.

/// Errors of the storage layer. Each becomes a 500 (`internal`) or a `failed` RUN_ERROR; the
/// cause is kept so it is logged whole, never sent to a client.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("unsupported database URL '{0}' (use sqlite://FILE or postgres://…)")]
    UnsupportedUrl(String),
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// Whether the database was only briefly away (a dropped connection, a restart or
    /// failover, a deadlock victim): the same statement may succeed when tried again.
    pub fn is_transient(&self) -> bool {
        let StoreError::Database(error) = self else { return false };
        match error {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => true,
            sqlx::Error::Database(error) => {
                error.code().is_some_and(|code| {
                    // 08…: connection exceptions; 57P01–57P03: the server is shutting down or
                    // starting; 40001/40P01: a serialisation failure or deadlock victim.
                    code.starts_with("08") || matches!(code.as_ref(), "57P01" | "57P02" | "57P03" | "40001" | "40P01")
                }) || self.is_missing_partition()
            }
            _ => false,
        }
    }

    /// Whether a statement failed because no partition of the log holds one of its turns
    /// (PostgreSQL): the partitions ahead were not made in time. The store makes them on
    /// seeing it (`store/postgres/partitions.rs`), so trying again succeeds.
    pub fn is_missing_partition(&self) -> bool {
        let StoreError::Database(sqlx::Error::Database(error)) = self else { return false };
        error.code().as_deref() == Some("23514") && error.message().starts_with("no partition of relation")
    }

    /// Whether the database answered and refused the statement (a constraint, a type): trying
    /// the same statement again cannot succeed, unlike a [transient](StoreError::is_transient)
    /// error or a fault of the gateway's own.
    pub fn is_refused_by_database(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::Database(_)))
    }
}
