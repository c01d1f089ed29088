//! The Stripe adapter (filled in by the processor-layer work).
