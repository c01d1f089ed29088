//! What the bench prints: one Markdown table, each figure next to what it is compared with.

use std::fmt::Write as _;
use std::time::Duration;

/// Things done in a measured time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// How many.
    pub count: u64,
    /// In how long.
    pub elapsed: Duration,
}

impl Rate {
    /// `count` in `elapsed`.
    pub fn new(count: u64, elapsed: Duration) -> Self {
        Rate { count, elapsed }
    }

    /// Per second.
    pub fn per_second(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.count as f64 / secs
        } else {
            0.0
        }
    }
}

/// One line of the results table.
#[derive(Debug, Clone)]
pub struct Row {
    /// What was measured.
    pub what: String,
    /// The figure.
    pub figure: String,
    /// What it is compared with (a baseline measured in the same run, or a target).
    pub against: String,
    /// figure / against, when both are numbers.
    pub ratio: String,
    /// Whether the target is met, when there is one.
    pub verdict: String,
}

/// The results of one run, in the order measured.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// The rows.
    pub rows: Vec<Row>,
}

impl Table {
    /// Adds a figure with no comparison.
    pub fn fact(&mut self, what: impl Into<String>, figure: impl Into<String>) {
        self.rows.push(Row {
            what: what.into(),
            figure: figure.into(),
            against: String::new(),
            ratio: String::new(),
            verdict: String::new(),
        });
    }

    /// Adds `figure` compared with `against`; `target_ratio` is the least (or, with `at_most`, the
    /// most) acceptable figure / against.
    pub fn compare(
        &mut self,
        what: impl Into<String>,
        figure: (f64, &str),
        against: (f64, &str),
        target: Option<Target>,
    ) {
        let ratio = if against.0 > 0.0 {
            figure.0 / against.0
        } else {
            0.0
        };
        let verdict = match target {
            None => String::new(),
            Some(Target::AtLeast(t)) if ratio >= t => format!("meets ≥ {t:.2}x"),
            Some(Target::AtLeast(t)) => format!("MISSES ≥ {t:.2}x"),
            Some(Target::AtMost(t)) if ratio <= t => format!("meets ≤ {t:.2}x"),
            Some(Target::AtMost(t)) => format!("MISSES ≤ {t:.2}x"),
        };
        // A ratio that rounds to its target's own figure gets a third decimal, so 0.495 against
        // 0.50 does not read as a met target marked as missed.
        let at_target = matches!(target, Some(Target::AtLeast(t) | Target::AtMost(t))
            if format!("{ratio:.2}") == format!("{t:.2}"));
        self.rows.push(Row {
            what: what.into(),
            figure: figure.1.to_string(),
            against: against.1.to_string(),
            ratio: if at_target {
                format!("{ratio:.3}x")
            } else {
                format!("{ratio:.2}x")
            },
            verdict,
        });
    }

    /// The table as Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| measured | figure | compared with | ratio | target |\n| --- | ---: | ---: | ---: | --- |\n",
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                r.what, r.figure, r.against, r.ratio, r.verdict
            );
        }
        out
    }
}

/// The acceptable range of a ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// figure / against must be at least this.
    AtLeast(f64),
    /// figure / against must be at most this.
    AtMost(f64),
}

/// `1,234/s` style.
pub fn per_second(rate: &Rate) -> String {
    format!("{}/s", thousands(rate.per_second().round() as u64))
}

/// `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_verdicts_follow_the_target_direction() {
        let mut t = Table::default();
        t.compare(
            "a",
            (3_000.0, "3,000/s"),
            (1_000.0, "1,000/s"),
            Some(Target::AtLeast(2.0)),
        );
        t.compare(
            "b",
            (1.6, "1.6 s"),
            (1.0, "1.0 s"),
            Some(Target::AtMost(1.5)),
        );
        t.compare(
            "c",
            (12_893.0, "12,893/s"),
            (26_027.0, "26,027/s"),
            Some(Target::AtLeast(0.5)),
        );
        let md = t.markdown();
        assert!(
            md.contains("| c | 12,893/s | 26,027/s | 0.495x | MISSES ≥ 0.50x |"),
            "a ratio at its target's rounding gets a third decimal: {md}"
        );
        assert!(
            md.contains("| a | 3,000/s | 1,000/s | 3.00x | meets ≥ 2.00x |"),
            "{md}"
        );
        assert!(
            md.contains("| b | 1.6 s | 1.0 s | 1.60x | MISSES ≤ 1.50x |"),
            "{md}"
        );
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
    }
}
