// The fuzz target bodies, shared verbatim by the cargo-fuzz targets (fuzz/fuzz_targets/*.rs, via
// `include!`) and by the integration tests (tests/integration/fuzz_bodies.rs, via `#[path]`), which
// replay the checked-in corpus and proptest-generated inputs in CI so the bodies cannot rot.
// Each body must never panic, whatever the bytes.

/// The secret the webhook body signs its well-formed deliveries with.
pub const FUZZ_WEBHOOK_SECRET: &str = "whsec_fuzz";

/// Webhook ingestion: the signature header parser on arbitrary text, verification of an arbitrary
/// header over an arbitrary payload, and (with a valid signature) the payload parser and the ledger
/// write path of `ingest` against an in-memory SQLite ledger. Input layout: header line, then body.
pub fn webhook_body(data: &[u8]) {
    use std::sync::OnceLock;
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    static LEDGER: OnceLock<payonce_ledger::SharedLedger> = OnceLock::new();

    let split = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
    let (header_bytes, rest) = data.split_at(split);
    let body = rest.strip_prefix(b"\n").unwrap_or(rest);
    let header = String::from_utf8_lossy(header_bytes);
    let secrets = vec![FUZZ_WEBHOOK_SECRET.to_string()];
    let _ = payonce_processor::stripe::webhook::parse_signature_header(&header);
    let _ = payonce_processor::stripe::webhook::verify_signature(
        &secrets,
        &header,
        body,
        1_800_000_000,
        Some(300),
    );

    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the fuzz body")
    });
    rt.block_on(async {
        let ledger = match LEDGER.get() {
            Some(l) => l.clone(),
            None => {
                let l = payonce_ledger::connect("sqlite::memory:", 1)
                    .await
                    .expect("an in-memory ledger");
                LEDGER.get_or_init(|| l).clone()
            }
        };
        let now = payonce_core::clock::Timestamp::from_millis(1_800_000_000_000);
        let signed = format!(
            "t={},v1={}",
            now.as_millis() / 1000,
            payonce_processor::stripe::webhook::sign(
                FUZZ_WEBHOOK_SECRET,
                now.as_millis() / 1000,
                body
            )
        );
        let _ =
            payonce_processor::ingest::ingest(ledger.as_ref(), &secrets, Some(&signed), body, now)
                .await;
        let _ =
            payonce_processor::ingest::ingest(ledger.as_ref(), &secrets, Some(&header), body, now)
                .await;
    });
}

/// The simulator's form decoder on arbitrary bytes.
pub fn form_body(data: &[u8]) {
    let _ = payonce_simulator::decode_form_for_fuzzing(data);
}
