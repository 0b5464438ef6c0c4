//! A node's fixed footprint. openraft makes its histograms when a node starts; the published
//! base2histogram then built the scales of all sixteen bucket widths, 26.8 MB written and kept
//! resident, for the one width openraft uses. The workspace patches it
//! (vendor/base2histogram/TENURE.md): this fails if that patch is lost.

/// This process's resident bytes, from `/proc/self/statm` (pages).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = (statm.split_whitespace().nth(1))
        .and_then(|field| field.parse().ok())
        .expect("statm's resident field");
    pages * rustix::param::page_size() as u64
}

#[test]
fn a_first_histogram_builds_only_the_scale_it_uses() {
    let before = resident_bytes();
    let mut histogram = base2histogram::Histogram::<()>::new();
    histogram.record(1_000);
    let grown = resident_bytes().saturating_sub(before);
    assert_eq!(histogram.total(), 1);
    assert!(
        grown < 4 << 20,
        "the first histogram made the process {grown} bytes larger"
    );
}
