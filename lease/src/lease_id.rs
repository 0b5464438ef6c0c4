//! Lease ids: `lse_<index>_<position>`, read only in the form the server writes, and the two
//! orders they sort in (by number for listings, as text for the due index).

use serde::{Deserialize, Serialize};

use super::types::Name;

/// A lease id, `lse_<index>_<position>`: the granting entry's index and the lease's place
/// among the leases that entry granted. Read ([`LeaseId::parse`]) only in the form it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LeaseId {
    pub index: u64,
    pub position: u32,
}

impl LeaseId {
    /// The id in its one written form: decimal numbers without sign or leading zeros.
    pub fn parse(lease_id: &str) -> Option<LeaseId> {
        fn number<T: std::str::FromStr>(digits: &str) -> Option<T> {
            let canonical = digits == "0"
                || (!digits.is_empty()
                    && !digits.starts_with('0')
                    && digits.bytes().all(|b| b.is_ascii_digit()));
            canonical.then(|| digits.parse().ok()).flatten()
        }
        let (index, position) = lease_id.strip_prefix("lse_")?.split_once('_')?;
        Some(LeaseId {
            index: number(index)?,
            position: number(position)?,
        })
    }

    /// Its written form, without the formatter's machinery (a snapshot's load makes one for
    /// each live lease).
    pub fn to_name(self) -> Name {
        use compact_str::ToCompactString;
        let mut name = Name::const_new("lse_");
        name.push_str(&self.index.to_compact_string());
        name.push('_');
        name.push_str(&self.position.to_compact_string());
        name
    }
}

/// A lease id ordered as its written form (`lse_<index>_<position>`) sorts as text, so that
/// `lse_1000_0` comes before `lse_999_0`: the due index's order, which decides which of the
/// leases due together an entry reclaims first, and which every release must keep. Held as
/// numbers (16 bytes, not a 24-byte name) and written out only when two ids are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WrittenOrder(pub LeaseId);

impl WrittenOrder {
    /// `<index>_<position>` in ASCII, right-aligned in `buffer`: where it starts.
    fn written(self, buffer: &mut [u8; 31]) -> usize {
        fn digits(mut n: u64, buffer: &mut [u8; 31], mut at: usize) -> usize {
            loop {
                at -= 1;
                buffer[at] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    return at;
                }
            }
        }
        let at = digits(u64::from(self.0.position), buffer, buffer.len());
        buffer[at - 1] = b'_';
        digits(self.0.index, buffer, at - 1)
    }
}

impl Ord for WrittenOrder {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if self.0 == other.0 {
            return std::cmp::Ordering::Equal;
        }
        let (mut mine, mut theirs) = ([0; 31], [0; 31]);
        let from_mine = self.written(&mut mine);
        let from_theirs = other.written(&mut theirs);
        mine[from_mine..].cmp(&theirs[from_theirs..])
    }
}

impl PartialOrd for WrittenOrder {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for LeaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lse_{}_{}", self.index, self.position)
    }
}

/// Where a server-made lease id (`lse_<index>_<position>`) sorts: by its granting entry, then
/// its position in that entry, which is the order leases are granted in.
/// Lenient, as it always was, unlike [`LeaseId::parse`]: a page token `lse_07_1` resumes
/// after (7, 1).
pub fn lease_order(lease_id: &str) -> Option<(u64, u32)> {
    let (index, position) = lease_id.strip_prefix("lse_")?.split_once('_')?;
    Some((index.parse().ok()?, position.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_id_is_read_only_in_the_form_the_server_writes() {
        let id = LeaseId::parse("lse_42_3").expect("canonical");
        assert_eq!((id.index, id.position), (42, 3));
        assert_eq!(id.to_string(), "lse_42_3");
        assert_eq!(LeaseId::parse(&id.to_string()), Some(id));
        for (index, position) in [(0, 0), (42, 3), (u64::MAX, u32::MAX)] {
            let id = LeaseId { index, position };
            assert_eq!(id.to_name(), id.to_string());
        }
        assert!(LeaseId::parse("lse_0_0").is_some());
        for other in [
            "lse_042_3",
            "lse_42_03",
            "lse_+42_3",
            "lse_42_",
            "lse__3",
            "lse_42",
            "LSE_42_3",
            "lse_42_3_",
            "lse_42_4294967296",
            "lse_18446744073709551616_0",
        ] {
            assert_eq!(LeaseId::parse(other), None, "{other}");
            assert_ne!(LeaseId::parse(other), Some(id), "{other}");
        }
    }

    proptest::proptest! {
        /// The due index orders ids as their text would sort, without writing them.
        #[test]
        fn lease_ids_in_written_order_sort_as_their_text(
            a in (0u64..=u64::MAX, 0u32..=u32::MAX),
            b in (0u64..=u64::MAX, 0u32..=u32::MAX),
            short in (0u64..2_000, 0u32..12, 0u64..2_000, 0u32..12),
        ) {
            let (c, d) = ((short.0, short.1), (short.2, short.3));
            for ((i, p), (j, q)) in [(a, b), (c, d), (a, a), (c, (c.0 * 10, c.1))] {
                let (x, y) = (LeaseId { index: i, position: p }, LeaseId { index: j, position: q });
                proptest::prop_assert_eq!(
                    WrittenOrder(x).cmp(&WrittenOrder(y)),
                    x.to_string().cmp(&y.to_string()),
                    "{} against {}", x, y
                );
            }
        }
    }

    #[test]
    fn the_written_order_is_not_the_numeric_one() {
        let id = |index, position| WrittenOrder(LeaseId { index, position });
        assert!(id(1000, 0) < id(999, 0));
        assert!(id(99, 0) < id(99, 1) && id(99, 10) < id(99, 9));
        assert!(id(10, 5) > id(105, 0), "'_' sorts after every digit");
        assert!(id(u64::MAX, u32::MAX) > id(u64::MAX, 0));
    }
}
