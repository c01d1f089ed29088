//! The demo's progress display: numbered steps with elapsed time. On a terminal a step being waited on
//! shows a spinner and a running clock on one line; anywhere else (CI, a pipe, a file) each step is one
//! plain line, so logs stay readable and tests can read them.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often the spinner redraws: fast enough to look alive, slow enough to cost nothing.
const SPINNER_TICK: Duration = Duration::from_millis(100);
/// Spinner frames.
const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// Numbered steps out of a known total.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    step: u32,
    total: u32,
    terminal: bool,
}

impl Progress {
    /// Starts the clock; spinners only if stdout is a terminal.
    pub fn new(total: u32) -> Self {
        Progress {
            started: Instant::now(),
            step: 0,
            total,
            terminal: std::io::stdout().is_terminal(),
        }
    }

    fn prefix(&self) -> String {
        format!(
            "[{:>5.1}s] {:>2}/{}",
            self.started.elapsed().as_secs_f64(),
            self.step,
            self.total
        )
    }

    /// Records a finished step.
    pub fn done(&mut self, what: &str) {
        self.step += 1;
        println!("{} {what}", self.prefix());
    }

    /// Prints an indented detail line under the last step.
    pub fn detail(&self, what: &str) {
        println!("             {what}");
    }

    /// Awaits `work` as the next step, spinning while it runs on a terminal; `what` names the wait and
    /// `done` turns the result into the step's line.
    pub async fn wait<T>(
        &mut self,
        what: &str,
        work: impl Future<Output = T>,
        done: impl FnOnce(&T) -> String,
    ) -> T {
        self.step += 1;
        let began = Instant::now();
        let result = if self.terminal {
            tokio::pin!(work);
            let mut tick = tokio::time::interval(SPINNER_TICK);
            let mut frame = 0usize;
            loop {
                tokio::select! {
                    r = &mut work => break r,
                    _ = tick.tick() => {
                        let spin = FRAMES[frame % FRAMES.len()];
                        frame += 1;
                        print!("\r\x1b[2K{} {spin} {what} ({:.1}s)", self.prefix(), began.elapsed().as_secs_f64());
                        let _ = std::io::stdout().flush();
                    }
                }
            }
        } else {
            work.await
        };
        let line = done(&result);
        if self.terminal {
            print!("\r\x1b[2K");
        }
        println!(
            "{} {line} (waited {:.1}s)",
            self.prefix(),
            began.elapsed().as_secs_f64()
        );
        result
    }
}
