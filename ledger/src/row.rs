//! Reading a returned row: [`LedgerRow`], the ledger's view of a row of either store, and
//! [`FromColumn`], the types a column is read as. The sqlx bounds decoding needs are stated once,
//! on the one `impl` of [`LedgerRow`] below; [`Dialect`](super::Dialect) requires its row type to
//! be a `LedgerRow`, so ledger code reads columns with nothing but `DB: Dialect`.

use super::LedgerError;
use payonce_core::clock::Timestamp;
use payonce_core::details::DetailsHash;
use payonce_core::id::{OperationId, TenantId};
use payonce_core::state::Status;
use sqlx::{ColumnIndex, Decode, Row, Type};
use std::fmt::Display;

/// A row as the ledger reads it: each column as one of the two stored types (`NULL` as `None`).
pub trait LedgerRow {
    /// An integer column.
    fn opt_int(&self, col: &'static str) -> Result<Option<i64>, sqlx::Error>;
    /// A text column.
    fn opt_text(&self, col: &'static str) -> Result<Option<String>, sqlx::Error>;

    /// A column, read as `T` (`i64`, `String`, [`Timestamp`], an id, a state, or an `Option`).
    fn get<T: FromColumn>(&self, col: &'static str) -> Result<T, LedgerError> {
        T::from_column(self, col)
    }

    /// A text column parsed into a domain type; a value that does not parse is
    /// [`LedgerError::Corrupt`].
    fn parse<T, E: Display>(
        &self,
        col: &'static str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<T, LedgerError> {
        parse(&self.get::<String>(col)?).map_err(corrupt)
    }
}

impl<R> LedgerRow for R
where
    R: Row,
    &'static str: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    fn opt_int(&self, col: &'static str) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(col)
    }

    fn opt_text(&self, col: &'static str) -> Result<Option<String>, sqlx::Error> {
        self.try_get(col)
    }
}

/// A type a column is read as.
pub trait FromColumn: Sized {
    /// Reads `col` of `row`; a `NULL` where none may be, or a value that does not parse, is
    /// [`LedgerError::Corrupt`].
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError>;
}

/// The error of a stored value the ledger cannot read back.
pub(crate) fn corrupt(e: impl Display) -> LedgerError {
    LedgerError::Corrupt(e.to_string())
}

fn present<T>(value: Option<T>, col: &'static str) -> Result<T, LedgerError> {
    value.ok_or_else(|| corrupt(format!("column {col} is NULL")))
}

impl FromColumn for Option<i64> {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        Ok(row.opt_int(col)?)
    }
}

impl FromColumn for i64 {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        present(row.opt_int(col)?, col)
    }
}

impl FromColumn for Option<String> {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        row.opt_text(col).map_err(LedgerError::from)
    }
}

impl FromColumn for String {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        present(row.opt_text(col)?, col)
    }
}

/// An instant is stored as its milliseconds since the epoch: this is where it comes back out.
impl FromColumn for Option<Timestamp> {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        Ok(row.opt_int(col)?.map(Timestamp::from_millis))
    }
}

impl FromColumn for Timestamp {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        row.get(col).map(Timestamp::from_millis)
    }
}

impl FromColumn for Option<OperationId> {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        let raw: Option<String> = row.get(col)?;
        raw.map(|id| OperationId::parse(&id).map_err(corrupt))
            .transpose()
    }
}

impl FromColumn for OperationId {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        row.parse(col, OperationId::parse)
    }
}

impl FromColumn for Status {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        let raw: String = row.get(col)?;
        Status::parse(&raw).ok_or_else(|| corrupt(format!("unknown status {raw}")))
    }
}

impl FromColumn for TenantId {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        row.parse(col, TenantId::parse)
    }
}

impl FromColumn for Option<DetailsHash> {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        let raw: Option<String> = row.get(col)?;
        raw.map(|h| DetailsHash::parse(&h).map_err(corrupt))
            .transpose()
    }
}

/// A JSON document stored as text (a processor's result, kept whole as evidence).
impl FromColumn for Option<serde_json::Value> {
    fn from_column<R: LedgerRow + ?Sized>(row: &R, col: &'static str) -> Result<Self, LedgerError> {
        let raw: Option<String> = row.get(col)?;
        raw.map(|json| serde_json::from_str(&json).map_err(corrupt))
            .transpose()
    }
}
