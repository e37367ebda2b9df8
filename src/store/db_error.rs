//! A database error that is not tied to a driver's own error type: a copy
//! of a sqlx error handed to every caller of a failed batch, and the errors
//! of the SQLite batch connection (rusqlite), so that the rest of the store
//! (unit-local errors, the HTTP mapping) sees one kind of database error.

use std::borrow::Cow;
use std::fmt;

#[derive(Debug)]
pub(crate) struct DbError {
    message: String,
    code: Option<String>,
    constraint: Option<String>,
    table: Option<String>,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    UniqueViolation,
    ForeignKeyViolation,
    NotNullViolation,
    CheckViolation,
    Other,
}

impl DbError {
    /// A copy of `db` (for another caller of the same batch).
    pub fn of(db: &dyn sqlx::error::DatabaseError) -> Self {
        use sqlx::error::ErrorKind as K;
        DbError {
            message: db.message().to_owned(),
            code: db.code().map(Cow::into_owned),
            constraint: db.constraint().map(str::to_owned),
            table: db.table().map(str::to_owned),
            kind: match db.kind() {
                K::UniqueViolation => Kind::UniqueViolation,
                K::ForeignKeyViolation => Kind::ForeignKeyViolation,
                K::NotNullViolation => Kind::NotNullViolation,
                K::CheckViolation => Kind::CheckViolation,
                _ => Kind::Other,
            },
        }
    }

    /// A failure of the SQLite batch connection, classified by its extended
    /// result code as sqlx classifies SQLite's errors (the code is kept as
    /// sqlx keeps it: the extended code in decimal).
    pub fn sqlite(err: &rusqlite::Error) -> Self {
        use rusqlite::ffi;
        let (code, kind) = match err {
            rusqlite::Error::SqliteFailure(e, _) => (
                Some(e.extended_code.to_string()),
                match e.extended_code {
                    ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                        Kind::UniqueViolation
                    }
                    ffi::SQLITE_CONSTRAINT_FOREIGNKEY => Kind::ForeignKeyViolation,
                    ffi::SQLITE_CONSTRAINT_NOTNULL => Kind::NotNullViolation,
                    ffi::SQLITE_CONSTRAINT_CHECK => Kind::CheckViolation,
                    _ => Kind::Other,
                },
            ),
            _ => (None, Kind::Other),
        };
        DbError {
            message: err.to_string(),
            code,
            constraint: None,
            table: None,
            kind,
        }
    }
}

impl From<rusqlite::Error> for super::StoreError {
    fn from(err: rusqlite::Error) -> Self {
        super::StoreError::Database(sqlx::Error::Database(Box::new(DbError::sqlite(&err))))
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DbError {}

impl sqlx::error::DatabaseError for DbError {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        self.code.as_deref().map(Cow::Borrowed)
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn constraint(&self) -> Option<&str> {
        self.constraint.as_deref()
    }

    fn table(&self) -> Option<&str> {
        self.table.as_deref()
    }

    fn kind(&self) -> sqlx::error::ErrorKind {
        use sqlx::error::ErrorKind as K;
        match self.kind {
            Kind::UniqueViolation => K::UniqueViolation,
            Kind::ForeignKeyViolation => K::ForeignKeyViolation,
            Kind::NotNullViolation => K::NotNullViolation,
            Kind::CheckViolation => K::CheckViolation,
            Kind::Other => K::Other,
        }
    }
}
