//! Peak resident memory of this process (Linux `/proc/self/status` `VmHWM`), resettable between
//! sections so each section's peak is its own.

/// Resets the peak to the current resident size (`/proc/self/clear_refs` value 5). False where the
/// kernel does not allow it; the peak then covers everything run so far.
pub fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The peak resident set size in KiB, if the platform reports it.
pub fn peak_kib() -> Option<u64> {
    vm_hwm_kib(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// `VmHWM` in KiB from the text of a `/proc/PID/status` file.
pub fn vm_hwm_kib(status: &str) -> Option<u64> {
    status_kib(status, "VmHWM:")
}

/// `RssAnon` in KiB (resident private memory now: heap, stacks; not the binary's code mapped from its
/// file) from the text of a `/proc/PID/status` file.
pub fn rss_anon_kib(status: &str) -> Option<u64> {
    status_kib(status, "RssAnon:")
}

fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_peak_is_readable_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(super::peak_kib().is_some_and(|kib| kib > 0));
        }
    }

    #[test]
    fn status_fields_are_read_by_name() {
        let status =
            "Name:\tpayonce\nVmHWM:\t   37736 kB\nVmRSS:\t   30000 kB\nRssAnon:\t   25496 kB\n";
        assert_eq!(super::vm_hwm_kib(status), Some(37_736));
        assert_eq!(super::rss_anon_kib(status), Some(25_496));
        assert_eq!(super::rss_anon_kib("Name:\tx\n"), None);
    }
}
