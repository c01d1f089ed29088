//! The steady soak's report as a Markdown table: counts, memory, the hint backlog, storage, verdict.

use super::{SteadyReport, TARGET_BYTES_PER_PAYMENT, TableBytes};
use std::fmt;

impl fmt::Display for SteadyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_counts(f)?;
        self.fmt_memory(f)?;
        self.fmt_hints(f)?;
        self.fmt_storage(f)?;
        write!(
            f,
            "| verdict | {} |",
            if self.is_clean() {
                "CLEAN"
            } else {
                "NOT CLEAN"
            }
        )
    }
}

impl SteadyReport {
    /// The rate, and what was created, settled, paid and answered.
    fn fmt_counts(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| steady soak: {} operations/s asked for {:.0} s; {:.1}/s created | |",
            self.rate,
            self.duration_s,
            self.created as f64 / self.duration_s.max(1e-9)
        )?;
        writeln!(f, "| --- | --- |")?;
        writeln!(
            f,
            "| operations created / settled | {} / {} |",
            self.created,
            self.settled()
        )?;
        let mut statuses: Vec<_> = self.statuses.iter().collect();
        statuses.sort();
        let statuses: Vec<String> = statuses.iter().map(|(s, n)| format!("{s} {n}")).collect();
        writeln!(f, "| final states | {} |", statuses.join(", "))?;
        writeln!(
            f,
            "| processor payments / paid twice / contradicted | {} / {} / {} |",
            self.payments, self.duplicates, self.mismatched
        )?;
        writeln!(
            f,
            "| tool calls / bad answers | {} / {} |",
            self.tool_calls, self.bad_tool_answers
        )?;
        Ok(())
    }

    /// Each process's resident memory at 10 %, 50 % and 100 % of the run.
    fn fmt_memory(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self
            .samples
            .first()
            .map(|s| s.rss_kib.iter().map(|(n, _)| n.as_str()).collect())
            .unwrap_or_default();
        names.dedup();
        for name in names {
            let at = |share| {
                self.rss_at(name, share)
                    .map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0))
            };
            writeln!(
                f,
                "| `{name}` RSS MiB at 10 % / 50 % / 100 % of the run | {} / {} / {} |",
                at(0.1),
                at(0.5),
                at(1.0)
            )?;
        }
        Ok(())
    }

    /// The unchecked webhook hints over the run, and the most seen.
    fn fmt_hints(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backlog = |share: f64| {
            let i = ((self.samples.len().saturating_sub(1)) as f64 * share).round() as usize;
            self.samples.get(i).map_or("-".into(), |s| {
                format!("{} ({:.0} s)", s.hint_backlog, s.hint_oldest_s)
            })
        };
        let worst = self
            .samples
            .iter()
            .max_by_key(|s| s.hint_backlog)
            .map_or("-".into(), |s| {
                format!("{} at {:.0} s", s.hint_backlog, s.at_s)
            });
        writeln!(
            f,
            "| unchecked webhook hints (oldest) at 10 % / 50 % / 100 % of the run; most | {} / {} / {}; {worst} |",
            backlog(0.1),
            backlog(0.5),
            backlog(1.0)
        )?;
        Ok(())
    }

    /// The database's growth, the final prune, and the bytes each settled payment left behind.
    fn fmt_storage(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (evidence, rest) = self.bytes_per_payment();
        let hours = self.duration_s / 3600.0;
        let first = self.samples.first().map_or(0, |s| s.database_bytes);
        writeln!(
            f,
            "| database size at the end (before the final prune); growth per hour of traffic | {:.1} MiB; {:.0} MiB/h |",
            self.database_bytes_at_end as f64 / 1_048_576.0,
            (self.database_bytes_at_end - first) as f64 / 1_048_576.0 / hours.max(1e-9)
        )?;
        writeln!(
            f,
            "| final prune (every period elapsed): webhooks / tool calls / tool answers / links / sessions | {} / {} / {} / {} / {} |",
            self.pruned.webhooks,
            self.pruned.tool_calls,
            self.pruned.tool_answers,
            self.pruned.links,
            self.pruned.sessions
        )?;
        let empty: Vec<&TableBytes> = self.tables.iter().filter(|t| t.rows == 0).collect();
        for t in self.tables.iter().filter(|t| t.rows > 0) {
            writeln!(
                f,
                "| `{}` after the prune and `VACUUM FULL`: rows; bytes per settled payment | {}; {:.0} |",
                t.table,
                t.rows,
                t.bytes as f64 / self.settled().max(1) as f64
            )?;
        }
        writeln!(
            f,
            "| {} empty tables (their first pages) after the prune: bytes per settled payment | {:.0} |",
            empty.len(),
            empty.iter().map(|t| t.bytes).sum::<i64>() as f64 / self.settled().max(1) as f64
        )?;
        writeln!(
            f,
            "| bytes per settled payment: operation and events; everything else (target ≤ {TARGET_BYTES_PER_PAYMENT:.0}) | {evidence:.0}; {rest:.0} |"
        )?;
        Ok(())
    }
}
