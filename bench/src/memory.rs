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
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
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
}
