//! The lock table's name, as a URL's `table=` gives it: validated, and
//! quoted the way each database quotes an identifier; and the check of a
//! table's columns ([`check_column`]).

use crate::error::LockError;

/// The table, validated: letters, digits and `_`, with one optional
/// schema prefix (`schema.table`; a database on MySQL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table {
    /// The schema, when named.
    pub(crate) schema: Option<String>,
    pub(crate) name: String,
}

impl Table {
    /// The table `text` names; [`LockError::Config`] when it is not
    /// letters, digits and `_` (not starting with a digit, at most
    /// `longest` of them: an identifier of the database's), with at most
    /// one `schema.` prefix.
    pub(crate) fn parse(text: &str, longest: usize) -> Result<Table, LockError> {
        let ident = |part: &str| {
            !part.is_empty()
                && part.len() <= longest
                && !part.starts_with(|c: char| c.is_ascii_digit())
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        let refused = || {
            LockError::Config(format!(
                "table={text:?}: a table is letters, digits and `_` (not starting with a \
                 digit, at most {longest} of them), with an optional `schema.` prefix"
            ))
        };
        match text.split_once('.') {
            Some((schema, name)) if ident(schema) && ident(name) => Ok(Table {
                schema: Some(schema.to_owned()),
                name: name.to_owned(),
            }),
            None if ident(text) => Ok(Table {
                schema: None,
                name: text.to_owned(),
            }),
            _ => Err(refused()),
        }
    }

    /// The table's name quoted for a statement with `quote` (`"` on
    /// PostgreSQL, `` ` `` on MySQL): `"schema"."name"`. Nothing to
    /// escape: [`parse`](Self::parse) let only letters, digits and `_` in.
    pub(crate) fn quoted(&self, quote: char) -> String {
        match &self.schema {
            Some(schema) => format!("{quote}{schema}{quote}.{quote}{}{quote}", self.name),
            None => format!("{quote}{}{quote}", self.name),
        }
    }

    /// The table beside this one, in its schema, named
    /// `<name>_<suffix>`; when that is longer than `longest`, by a hash of
    /// the name (`locks_<suffix>_<hash>`, the same in every client).
    pub(crate) fn beside(&self, suffix: &str, longest: usize) -> Table {
        let name = format!("{}_{suffix}", self.name);
        let name = if name.len() <= longest {
            name
        } else {
            format!("locks_{suffix}_{:016x}", fnv(&self.name))
        };
        Table {
            schema: self.schema.clone(),
            name,
        }
    }

    /// `schema.name`, or `name`.
    pub(crate) fn qualified(&self) -> String {
        match &self.schema {
            Some(schema) => format!("{schema}.{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// FNV-1a of `text`: a short name for a long one, the same in every
/// client.
pub(crate) fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What a database's catalog says of one column of a lock table.
pub(crate) struct Found<'a> {
    /// Its type's name, in lower case.
    pub(crate) kind: &'a str,
    /// It may be NULL.
    pub(crate) nullable: bool,
    /// Its most characters, for a character column.
    pub(crate) length: Option<usize>,
}

/// Refuses table `quoted` when its `column` (`found` in the catalog, or
/// not) is not what a lock table's is: there, of one of `types`, NOT
/// NULL, and for `locked_by` long enough for a holder id. A ShedLock table
/// without `fence` is told the statement that adds it. The column's
/// length, else.
pub(crate) fn check_column(
    quoted: &str,
    column: &str,
    types: &[&str],
    found: Option<Found<'_>>,
) -> Result<Option<usize>, LockError> {
    let not = |what: String| {
        Err(LockError::Config(format!(
            "the table {quoted} is not a lock table: {what}"
        )))
    };
    let Some(found) = found else {
        let fix = if column == "fence" {
            format!(
                " (a ShedLock table gains it with: ALTER TABLE {quoted} ADD COLUMN fence BIGINT \
                 NOT NULL DEFAULT 0;)"
            )
        } else {
            String::new()
        };
        return not(format!("it has no `{column}` column{fix}"));
    };
    if !types.contains(&found.kind) {
        return not(format!(
            "its `{column}` column is {}, not {}",
            found.kind,
            types.join(" or ")
        ));
    }
    if found.nullable {
        return not(format!("its `{column}` column may be NULL"));
    }
    // A holder id (a UUID, `:`, a number) marked kept.
    if column == "locked_by" && found.length.is_some_and(|n| n < 64) {
        return Err(LockError::Config(format!(
            "the table {quoted}: its `locked_by` column is shorter than a holder id (64 \
             characters); ShedLock's is VARCHAR(255)"
        )));
    }
    Ok(found.length)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_letters_digits_and_one_schema() {
        assert_eq!(Table::parse("locks", 63).unwrap().quoted('"'), "\"locks\"");
        let t = Table::parse("ops.job_locks", 63).unwrap();
        assert_eq!(t.quoted('"'), "\"ops\".\"job_locks\"");
        assert_eq!(t.quoted('`'), "`ops`.`job_locks`");
        assert_eq!(t.qualified(), "ops.job_locks");
        assert!(Table::parse(&"t".repeat(64), 64).is_ok());
        assert!(Table::parse(&"t".repeat(64), 63).is_err());
        for bad in [
            "", "a.b.c", "x;drop", "\"x\"", "1abc", "a b", ".x", "x.", "a`b",
        ] {
            assert!(
                matches!(Table::parse(bad, 63), Err(LockError::Config(_))),
                "{bad:?}"
            );
        }
    }
}
