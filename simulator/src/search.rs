//! The subset of Stripe's search query language the simulator understands:
//! clauses `metadata['key']:'value'` or `field:'value'` (field: customer, status, currency, amount),
//! joined by ` AND `; single or double quotes.

use crate::store::PaymentRow;

/// Most clauses in one query (Stripe: 10).
const CLAUSES_MAX: usize = 10;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Field {
    Metadata(String),
    Customer,
    Status,
    Currency,
    Amount,
}

/// A parsed search query: every clause must match.
#[derive(Debug, Clone)]
pub(crate) struct Query {
    clauses: Vec<(Field, String)>,
}

fn unquote(raw: &str) -> Option<&str> {
    let raw = raw.trim();
    for q in ['\'', '"'] {
        if let Some(inner) = raw.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return Some(inner);
        }
    }
    None
}

impl Query {
    /// Parses a query; `Err` says why.
    pub(crate) fn parse(raw: &str) -> Result<Query, String> {
        let mut clauses = Vec::new();
        for part in raw.split(" AND ") {
            let part = part.trim();
            let (field, value) = if let Some(rest) = part.strip_prefix("metadata[") {
                let (key, value) = rest
                    .split_once("]:")
                    .ok_or("expected metadata['key']:'value'")?;
                let key = unquote(key).ok_or("metadata key must be quoted")?;
                (Field::Metadata(key.to_string()), value)
            } else {
                let (name, value) = part.split_once(':').ok_or("expected field:'value'")?;
                let field = match name.trim() {
                    "customer" => Field::Customer,
                    "status" => Field::Status,
                    "currency" => Field::Currency,
                    "amount" => Field::Amount,
                    other => return Err(format!("unsupported search field {other:?}")),
                };
                (field, value)
            };
            let value = unquote(value).ok_or("value must be quoted")?;
            clauses.push((field, value.to_string()));
        }
        if clauses.is_empty() || clauses.len() > CLAUSES_MAX {
            return Err(format!("a query holds 1 to {CLAUSES_MAX} clauses"));
        }
        Ok(Query { clauses })
    }

    /// Whether a payment matches every clause.
    pub(crate) fn matches(&self, row: &PaymentRow) -> bool {
        let metadata: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&row.metadata).unwrap_or_default();
        self.clauses.iter().all(|(field, value)| match field {
            Field::Metadata(k) => metadata.get(k).and_then(|v| v.as_str()) == Some(value.as_str()),
            Field::Customer => row.customer.as_deref() == Some(value.as_str()),
            Field::Status => row.status == *value,
            Field::Currency => row.currency == *value,
            Field::Amount => row.amount.to_string() == *value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_metadata_and_fields() {
        let q = Query::parse("metadata['payonce_operation_id']:'op_1' AND status:\"succeeded\"")
            .unwrap();
        assert_eq!(q.clauses.len(), 2);
        assert_eq!(
            q.clauses[0],
            (
                Field::Metadata("payonce_operation_id".into()),
                "op_1".into()
            )
        );
        assert!(Query::parse("bogus:'x'").is_err());
        assert!(Query::parse("metadata['k']:v").is_err());
    }
}
