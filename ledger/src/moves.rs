//! How a statement writes a state change: its `status`, `last_event` and `WHERE status ...` are
//! taken from a [`Move`] of the state machine's table (`payonce_core::state`), never typed as literals,
//! so a statement cannot move a row the table does not allow. The database's audit trigger logs
//! each change from the `last_event` the statement set.

use super::record::operation_columns;
use payonce_core::state::{Event, Move, Status};

/// The move `event` makes from `from`. The statements are fixed at build time, so an illegal one
/// is a programming error; every statement is built by the unit tests of its module.
pub(crate) fn legal(from: &[Status], event: Event) -> Move {
    match Move::new(from, event) {
        Ok(mv) => mv,
        Err(illegal) => panic!("a ledger statement names an illegal move: {illegal}"),
    }
}

/// `{column} = 'x'` for one state (so a partial index on that state still serves the statement),
/// `{column} IN ('x', 'y')` for several.
pub(crate) fn status_in(column: &str, from: &[Status]) -> String {
    match from {
        [one] => format!("{column} = '{}'", one.as_str()),
        many => {
            let list: Vec<String> = many.iter().map(|s| format!("'{}'", s.as_str())).collect();
            format!("{column} IN ({})", list.join(", "))
        }
    }
}

/// `UPDATE operations SET status = <to>, last_event = <event>, {set} WHERE {filter} AND status
/// IN <from>`, returning the operation's columns when asked.
pub(crate) fn update(mv: &Move, set: &str, filter: &str, returning: bool) -> String {
    update_logged_as(mv, mv.event.as_str(), set, filter, returning)
}

/// [`update`], logged as `logged` instead of the move's event name: a claim that also records its
/// submission is logged as [`payonce_core::state::SUBMITTING_CLAIM`].
pub(crate) fn update_logged_as(
    mv: &Move,
    logged: &str,
    set: &str,
    filter: &str,
    returning: bool,
) -> String {
    format!(
        "UPDATE operations SET status = '{to}', last_event = '{logged}', {set} WHERE {filter} AND {from}{ret}",
        to = mv.to.as_str(),
        from = status_in("status", &mv.from),
        ret = if returning {
            concat!(" RETURNING ", operation_columns!())
        } else {
            ""
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_names_the_tables_states_and_event() {
        let sql = update(
            &legal(&[Status::AwaitingApproval, Status::Ready], Event::Cancel),
            "updated_at = $2",
            "id = $1",
            true,
        );
        assert_eq!(
            sql,
            "UPDATE operations SET status = 'cancelled', last_event = 'cancel', updated_at = $2 \
             WHERE id = $1 AND status IN ('awaiting_approval', 'ready') RETURNING "
                .to_string()
                + operation_columns!()
        );
        assert_eq!(
            status_in("o.status", &[Status::Ready]),
            "o.status = 'ready'"
        );
    }

    #[test]
    #[should_panic(expected = "illegal move")]
    fn an_illegal_statement_cannot_be_built() {
        legal(&[Status::Executing], Event::Cancel);
    }
}
