//! The one bound the shared SQL needs: [`SqlDb`], a database sqlx can run this store's
//! statements on, whose capabilities are methods rather than sqlx's where-clauses.
//!
//! sqlx's generic bounds (`for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>`,
//! `i64: Encode<DB> + Type<DB>`, …) are not implied by a trait that lists them: every generic
//! function would have to repeat them. So they are written once, on the blanket impl of
//! [`SqlDb`] below, and generic code names only `DB: SqlDb`. The compiler checks them for each
//! database where a backend names its `Db` (PostgreSQL, SQLite).
//!
//! Statements are built with [`Stmt`] (`Stmt::new(sql).bind(..).fetch_all(pool)`), run on a pool
//! or an open transaction ([`On`]), and their rows read with [`Record::get`].

use futures_util::future::BoxFuture;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Transaction, Type};

use super::error::StoreError;

type Query<'q, DB> = sqlx::query::Query<'q, DB, <DB as Database>::Arguments<'q>>;

/// A value bound to a statement parameter: the types the store's statements take.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'q> {
    I64(i64),
    I32(i32),
    I16(i16),
    Bool(bool),
    Text(&'q str),
    OptText(Option<&'q str>),
    OptI64(Option<i64>),
    Bytes(&'q [u8]),
}

impl From<i64> for Arg<'_> {
    fn from(value: i64) -> Self {
        Arg::I64(value)
    }
}

impl From<i32> for Arg<'_> {
    fn from(value: i32) -> Self {
        Arg::I32(value)
    }
}

impl From<i16> for Arg<'_> {
    fn from(value: i16) -> Self {
        Arg::I16(value)
    }
}

impl From<bool> for Arg<'_> {
    fn from(value: bool) -> Self {
        Arg::Bool(value)
    }
}

impl<'q> From<&'q str> for Arg<'q> {
    fn from(value: &'q str) -> Self {
        Arg::Text(value)
    }
}

impl<'q> From<&'q String> for Arg<'q> {
    fn from(value: &'q String) -> Self {
        Arg::Text(value)
    }
}

impl<'q> From<&'q Option<String>> for Arg<'q> {
    fn from(value: &'q Option<String>) -> Self {
        Arg::OptText(value.as_deref())
    }
}

impl<'q> From<&'q [u8]> for Arg<'q> {
    fn from(value: &'q [u8]) -> Self {
        Arg::Bytes(value)
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(value: Option<i64>) -> Self {
        Arg::OptI64(value)
    }
}

/// Where a statement runs: on a pool (a connection of its own, committed at once) or inside an
/// open transaction.
pub(crate) enum On<'e, DB: Database> {
    Pool(&'e Pool<DB>),
    Tx(&'e mut DB::Connection),
}

impl<'e, DB: Database> From<&'e Pool<DB>> for On<'e, DB> {
    fn from(pool: &'e Pool<DB>) -> Self {
        On::Pool(pool)
    }
}

impl<'e, 't, DB: Database> From<&'e mut Transaction<'t, DB>> for On<'e, DB> {
    fn from(tx: &'e mut Transaction<'t, DB>) -> Self {
        On::Tx(&mut **tx)
    }
}

/// How many rows a statement changed; sqlx keeps this on each driver's own result type.
pub(crate) trait RowsAffected {
    fn rows_affected(&self) -> u64;
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::postgres::PgQueryResult::rows_affected(self)
    }
}

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::sqlite::SqliteQueryResult::rows_affected(self)
    }
}

/// A database the shared SQL runs on. Implemented (below, once) for every sqlx database that
/// can bind and read the store's column types.
pub(crate) trait SqlDb: Database {
    fn bind<'q>(query: Query<'q, Self>, arg: Arg<'q>) -> Query<'q, Self>;
    /// Rows changed.
    fn execute<'e, 'q: 'e>(query: Query<'q, Self>, on: On<'e, Self>) -> BoxFuture<'e, Result<u64, sqlx::Error>>;
    fn fetch_all<'e, 'q: 'e>(
        query: Query<'q, Self>,
        on: On<'e, Self>,
    ) -> BoxFuture<'e, Result<Vec<Self::Row>, sqlx::Error>>;
    fn fetch_optional<'e, 'q: 'e>(
        query: Query<'q, Self>,
        on: On<'e, Self>,
    ) -> BoxFuture<'e, Result<Option<Self::Row>, sqlx::Error>>;
    fn fetch_one<'e, 'q: 'e>(query: Query<'q, Self>, on: On<'e, Self>)
        -> BoxFuture<'e, Result<Self::Row, sqlx::Error>>;

    fn get_i64(row: &Self::Row, column: &str) -> Result<i64, sqlx::Error>;
    fn get_i32(row: &Self::Row, column: &str) -> Result<i32, sqlx::Error>;
    fn get_i16(row: &Self::Row, column: &str) -> Result<i16, sqlx::Error>;
    fn get_bool(row: &Self::Row, column: &str) -> Result<bool, sqlx::Error>;
    fn get_text(row: &Self::Row, column: &str) -> Result<String, sqlx::Error>;
    fn get_opt_text(row: &Self::Row, column: &str) -> Result<Option<String>, sqlx::Error>;
    fn get_opt_i64(row: &Self::Row, column: &str) -> Result<Option<i64>, sqlx::Error>;
    fn get_opt_bytes(row: &Self::Row, column: &str) -> Result<Option<Vec<u8>>, sqlx::Error>;
}

impl<DB> SqlDb for DB
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'a> &'a str: ColumnIndex<DB::Row>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> i32: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> i16: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> String: Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Decode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'q> Option<Vec<u8>>: Decode<'q, DB> + Type<DB>,
{
    fn bind<'q>(query: Query<'q, Self>, arg: Arg<'q>) -> Query<'q, Self> {
        match arg {
            Arg::I64(value) => query.bind(value),
            Arg::I32(value) => query.bind(value),
            Arg::I16(value) => query.bind(value),
            Arg::Bool(value) => query.bind(value),
            Arg::Text(value) => query.bind(value),
            Arg::OptText(value) => query.bind(value),
            Arg::OptI64(value) => query.bind(value),
            Arg::Bytes(value) => query.bind(value),
        }
    }

    fn execute<'e, 'q: 'e>(query: Query<'q, Self>, on: On<'e, Self>) -> BoxFuture<'e, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            let done = match on {
                On::Pool(pool) => query.execute(pool).await?,
                On::Tx(connection) => query.execute(connection).await?,
            };
            Ok(done.rows_affected())
        })
    }

    fn fetch_all<'e, 'q: 'e>(
        query: Query<'q, Self>,
        on: On<'e, Self>,
    ) -> BoxFuture<'e, Result<Vec<Self::Row>, sqlx::Error>> {
        Box::pin(async move {
            match on {
                On::Pool(pool) => query.fetch_all(pool).await,
                On::Tx(connection) => query.fetch_all(connection).await,
            }
        })
    }

    fn fetch_optional<'e, 'q: 'e>(
        query: Query<'q, Self>,
        on: On<'e, Self>,
    ) -> BoxFuture<'e, Result<Option<Self::Row>, sqlx::Error>> {
        Box::pin(async move {
            match on {
                On::Pool(pool) => query.fetch_optional(pool).await,
                On::Tx(connection) => query.fetch_optional(connection).await,
            }
        })
    }

    fn fetch_one<'e, 'q: 'e>(
        query: Query<'q, Self>,
        on: On<'e, Self>,
    ) -> BoxFuture<'e, Result<Self::Row, sqlx::Error>> {
        Box::pin(async move {
            match on {
                On::Pool(pool) => query.fetch_one(pool).await,
                On::Tx(connection) => query.fetch_one(connection).await,
            }
        })
    }

    fn get_i64(row: &Self::Row, column: &str) -> Result<i64, sqlx::Error> {
        row.try_get(column)
    }

    fn get_i32(row: &Self::Row, column: &str) -> Result<i32, sqlx::Error> {
        row.try_get(column)
    }

    fn get_i16(row: &Self::Row, column: &str) -> Result<i16, sqlx::Error> {
        row.try_get(column)
    }

    fn get_bool(row: &Self::Row, column: &str) -> Result<bool, sqlx::Error> {
        row.try_get(column)
    }

    fn get_text(row: &Self::Row, column: &str) -> Result<String, sqlx::Error> {
        row.try_get(column)
    }

    fn get_opt_text(row: &Self::Row, column: &str) -> Result<Option<String>, sqlx::Error> {
        row.try_get(column)
    }

    fn get_opt_i64(row: &Self::Row, column: &str) -> Result<Option<i64>, sqlx::Error> {
        row.try_get(column)
    }

    fn get_opt_bytes(row: &Self::Row, column: &str) -> Result<Option<Vec<u8>>, sqlx::Error> {
        row.try_get(column)
    }
}

/// One statement with its parameters, for the database `DB`.
pub(crate) struct Stmt<'q, DB: Database>(Query<'q, DB>);

impl<'q, DB: SqlDb> Stmt<'q, DB> {
    pub(crate) fn new(sql: &'q str) -> Self {
        Stmt(sqlx::query(sql))
    }

    /// Binds the next `$n` parameter.
    pub(crate) fn bind(self, value: impl Into<Arg<'q>>) -> Self {
        Stmt(DB::bind(self.0, value.into()))
    }

    /// Runs the statement; returns how many rows it changed.
    pub(crate) async fn execute<'e>(self, on: impl Into<On<'e, DB>>) -> Result<u64, StoreError>
    where
        'q: 'e,
    {
        Ok(DB::execute(self.0, on.into()).await?)
    }

    pub(crate) async fn fetch_all<'e>(self, on: impl Into<On<'e, DB>>) -> Result<Vec<Record<DB>>, StoreError>
    where
        'q: 'e,
    {
        Ok(DB::fetch_all(self.0, on.into()).await?.into_iter().map(Record).collect())
    }

    pub(crate) async fn fetch_optional<'e>(self, on: impl Into<On<'e, DB>>) -> Result<Option<Record<DB>>, StoreError>
    where
        'q: 'e,
    {
        Ok(DB::fetch_optional(self.0, on.into()).await?.map(Record))
    }

    /// Every row, each decoded into a row type by `decode` (`turn_row`, `interrupt_row`, …).
    pub(crate) async fn fetch_all_as<'e, T>(
        self,
        on: impl Into<On<'e, DB>>,
        decode: impl Fn(&Record<DB>) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError>
    where
        'q: 'e,
    {
        self.fetch_all(on).await?.iter().map(decode).collect()
    }

    /// The row, if there is one, decoded by `decode`.
    pub(crate) async fn fetch_optional_as<'e, T>(
        self,
        on: impl Into<On<'e, DB>>,
        decode: impl Fn(&Record<DB>) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError>
    where
        'q: 'e,
    {
        self.fetch_optional(on).await?.as_ref().map(decode).transpose()
    }

    /// The first row; an error when there is none.
    pub(crate) async fn fetch_one<'e>(self, on: impl Into<On<'e, DB>>) -> Result<Record<DB>, StoreError>
    where
        'q: 'e,
    {
        Ok(Record(DB::fetch_one(self.0, on.into()).await?))
    }
}

/// A row a statement returned. It names its database, so the functions decoding rows infer it.
pub(crate) struct Record<DB: Database>(DB::Row);

impl<DB: SqlDb> Record<DB> {
    /// The value of `column`, decoded as `T`.
    pub(crate) fn get<T: Column>(&self, column: &str) -> Result<T, StoreError> {
        Ok(T::read::<DB>(&self.0, column)?)
    }
}

/// A column type the store reads.
pub(crate) trait Column: Sized {
    fn read<DB: SqlDb>(row: &DB::Row, column: &str) -> Result<Self, sqlx::Error>;
}

impl Column for i64 {
    fn read<DB: SqlDb>(row: &DB::Row, column: &str) -> Result<Self, sqlx::Error> {
        DB::get_i64(row, column)
    }
}

impl Column for i32 {
    fn read<DB: SqlDb>(row: &DB::Row, column: &str) -> Result<Self, sqlx::Error> {
        DB::get_i32(row, column)
    }
}

impl Column for i16 {
    fn read<DB: SqlDb>(row: &DB::Row, column: &str) -> Result<Self, sqlx::Error> {
        DB::get_i16(row, column)
    }
}

impl Column for bool {
    fn read<DB: SqlDb>(row: &DB::Row, column: &str) -> Result<Self, sqlx::Error> {
        DB::get_bool(row, column)
    }
}

impl Column for String {
    fn read<DB: SqlDb>(row: &DB::Row, column: &str) -> Result<Self, sqlx::Error> {
        DB::get_text(row, column)
    }
}

impl Column for Option<String> {
    fn read<DB: SqlDb>(row: &DB::Row, column: &str) -> Result<Self, sqlx::Error> {
        DB::get_opt_text(row, column)
    }
}

impl Column for Option<i64> {
    fn read<DB: SqlDb>(row: &DB::Row, column: &str) -> Result<Self, sqlx::Error> {
        DB::get_opt_i64(row, column)
    }
}

impl Column for Option<Vec<u8>> {
    fn read<DB: SqlDb>(row: &DB::Row, column: &str) -> Result<Self, sqlx::Error> {
        DB::get_opt_bytes(row, column)
    }
}
