//! The bench's worker-process section against the real `payonce` binary: a worker process drains
//! every operation from a simulator process, pays each once, both exit cleanly on SIGTERM, and the
//! section reads the worker's own peak memory and each process's CPU time. Over both protocols the
//! worker speaks to the processor (`PAYONCE_PROCESSOR_HTTP2`).

use payonce_bench::database::ADMIN_URL_DEFAULT;
use payonce_bench::process::Protocol;
use std::path::Path;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_drains_over_http_and_reports_its_own_peak_memory_and_cpu() {
    let admin = std::env::var("DATABASE_URL").unwrap_or_else(|_| ADMIN_URL_DEFAULT.to_string());
    for protocol in Protocol::ALL {
        // `drain` checks every operation succeeded with one payment each at the simulator.
        let measured = payonce_bench::process::drain(
            &admin,
            Path::new(crate::support::payonce_bin()),
            100,
            (16, protocol),
            Duration::from_millis(5),
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|e| panic!("worker process section over {protocol:?} failed: {e:#}"));
        assert_eq!(measured.rate.count, 100);
        // A process's peak resident set is at least a few MiB; zero would mean the wrong file was read.
        assert!(measured.peak_kib > 1_024, "{measured:?}");
        // The worker made 100 payments over HTTP and its ledger calls: some CPU time, all of it
        // inside the machine's busy time over the same span.
        let cpu = measured.cpu;
        assert!(cpu.worker > Duration::ZERO, "{cpu:?}");
        assert!(cpu.machine_busy >= cpu.worker, "{cpu:?}");
        assert!(cpu.machine_busy <= cpu.machine_capacity, "{cpu:?}");
        // HTTP/2 multiplexes the 16 requests in flight on one connection; HTTP/1.1 needs one each.
        match protocol {
            Protocol::Http2 => assert_eq!(measured.connections, 1, "{measured:?}"),
            Protocol::Http1 => assert!(measured.connections > 1, "{measured:?}"),
        }
    }
}
