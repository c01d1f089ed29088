//! Which processor serves an operation: the one its row names (bound at creation from its tenant's
//! choice, `payonce tenant set-processor`), else the process's configured one. A process holds one
//! adapter per processor it is configured for; an operation naming another is never guessed onto
//! one it has.

use super::Processor;
use payonce_core::operation::ProcessorKind;
use payonce_ledger::Operation;
use std::sync::Arc;

/// An operation names a processor this process has no adapter for: it must not be submitted,
/// looked up or retried here (another processor would charge a second time, or find nothing and
/// conclude wrongly).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "operation names processor {named}, which this process has no configuration for (configured: \
     {configured}); nothing was sent"
)]
pub struct Unconfigured {
    /// The processor the row names.
    pub named: ProcessorKind,
    /// What this process is configured for, comma-separated.
    pub configured: String,
}

/// The adapters one process is configured for: its default (`processor`, serving every row that
/// names none) and any beside it.
#[derive(Clone)]
pub struct Processors {
    default: ProcessorKind,
    adapters: Vec<(ProcessorKind, Arc<dyn Processor>)>,
}

impl std::fmt::Debug for Processors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processors")
            .field("default", &self.default)
            .field("configured", &self.configured())
            .finish()
    }
}

impl Processors {
    /// One adapter, the default: a process configured for a single processor (as before tenants
    /// could choose). Its kind is its contract's wire; a wire that is no [`ProcessorKind`] (a
    /// contract on Stripe's wire always is `stripe`) counts as Stripe's.
    pub fn single(adapter: Arc<dyn Processor>) -> Processors {
        let kind = ProcessorKind::parse(adapter.contract().wire).unwrap_or(ProcessorKind::Stripe);
        Processors {
            default: kind,
            adapters: vec![(kind, adapter)],
        }
    }

    /// Adds `adapter` for `kind` beside the default; refuses a second adapter for a kind.
    pub fn with(
        mut self,
        kind: ProcessorKind,
        adapter: Arc<dyn Processor>,
    ) -> Result<Self, String> {
        if self.get(kind).is_some() {
            return Err(format!("processor {kind} is configured twice"));
        }
        self.adapters.push((kind, adapter));
        Ok(self)
    }

    /// The processor a row naming none is served by.
    pub fn default_kind(&self) -> ProcessorKind {
        self.default
    }

    /// The adapter for `kind`, if this process is configured for it.
    pub fn get(&self, kind: ProcessorKind) -> Option<&Arc<dyn Processor>> {
        self.adapters
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, a)| a)
    }

    /// Every configured adapter, the default first.
    pub fn all(&self) -> impl Iterator<Item = (ProcessorKind, &Arc<dyn Processor>)> {
        self.adapters.iter().map(|(k, a)| (*k, a))
    }

    /// The processor `op` is served by: the one its row names, else the default.
    pub fn kind_of(&self, op: &Operation) -> ProcessorKind {
        op.processor.unwrap_or(self.default)
    }

    /// The adapter that serves `op`, or why none here may.
    pub fn route(&self, op: &Operation) -> Result<&Arc<dyn Processor>, Unconfigured> {
        let kind = self.kind_of(op);
        self.get(kind).ok_or_else(|| Unconfigured {
            named: kind,
            configured: self.configured(),
        })
    }

    /// The configured kinds, comma-separated (the default first).
    pub fn configured(&self) -> String {
        self.adapters
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl From<Arc<dyn Processor>> for Processors {
    fn from(adapter: Arc<dyn Processor>) -> Processors {
        Processors::single(adapter)
    }
}
