//! The directory guard (docs/fencing.md, "Files in a directory"): files in a plain directory,
//! written only with a current fencing token. Beside the data, `.tenure-fence/` keeps for each
//! resource a token file (`EXCLUSIVE SHARED`, the highest tokens written with) and a lock
//! file. A guarded write of `NAME`:
//!
//! 1. writes the new contents to a temporary file in the directory and syncs it;
//! 2. takes the resource's lock (`flock`, exclusive: one writer of the resource at a time, on
//!    this machine or any sharing the file system's locks);
//! 3. reads the token file and applies the rule: a stale token drops the temporary file and
//!    is refused ([`Error::Stale`], both tokens named), and nothing changes;
//! 4. replaces the token file (a synced temporary file renamed over it, the directory synced),
//!    then renames the data into place and syncs the directory;
//! 5. releases the lock.
//!
//! The fence moves before the data: after a crash between the two, a later tenure's token is
//! recorded and its file not yet written, which refuses the stale writer all the same; the
//! other order could leave a newer tenure's file that an older token may still replace.
//! Readers need no lock: a rename replaces a file whole. A writer of something else than one
//! file holds [`Held`] instead: the lock, a check that records the token, then its writes.
//! The calls block: from async code, run them on a blocking thread
//! (`tokio::task::spawn_blocking`).

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use std::os::unix::fs::PermissionsExt;

use rustix::fs::{flock, FlockOperation};

use crate::{valid_token, Error, Fence, Mode};

/// The directory, inside the guarded one, that keeps the tokens and the locks.
pub const FENCE_DIR: &str = ".tenure-fence";

/// The longest file name a resource's token file may have (file systems allow 255 bytes).
const MAX_FILE_NAME: usize = 240;

/// Writes `contents` to `dir/name` if `token` passes `resource`'s fence, as the module says.
/// `name` is a plain file name in `dir` (no `/`, not `.` or `..`, not starting with
/// `.tenure-` in any case, not a directory). The fence is the resource's, not the file's:
/// writers of one file must name one resource. A new file gets mode 0666 less the umask, a
/// replaced one keeps its mode.
pub fn write(
    dir: &Path,
    resource: &str,
    token: u64,
    mode: Mode,
    name: &str,
    contents: &[u8],
) -> Result<(), Error> {
    valid_token(token)?;
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.contains(['/', '\0'])
        || name.to_ascii_lowercase().starts_with(".tenure-")
    {
        return Err(Error::Name(format!(
            "{name:?} is not a file name the directory guard writes (a plain name, not .tenure-…)"
        )));
    }
    let target = dir.join(name);
    // The mode a replaced file had (its permission bits, set exactly), or 0666 less the umask.
    let kept = match std::fs::metadata(&target) {
        Ok(meta) if meta.is_dir() => {
            return Err(Error::Name(format!("{name:?} is a directory")));
        }
        Ok(meta) => Some(meta.permissions().mode() & 0o777),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let mut data = tempfile::Builder::new()
        .prefix(".tenure-tmp.")
        .permissions(PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)?;
    if let Some(mode) = kept {
        data.as_file()
            .set_permissions(PermissionsExt::from_mode(mode))?;
    }
    data.write_all(contents)?;
    data.as_file().sync_all()?;
    let held = Held::lock(dir, resource)?;
    held.admit(token, mode)?;
    data.persist(target).map_err(|e| e.error)?;
    sync_dir(dir)?;
    // Dropping `held` releases the lock.
    Ok(())
}

/// A resource's lock in a guarded directory, held until dropped: what a writer that is not
/// one file (an HTTP handler behind `crate::http`, several files, a program's own steps)
/// holds while it checks its token with [`Held::admit`] and then writes.
pub struct Held {
    /// The locked file (closing it releases the `flock`).
    _lock: File,
    resource: String,
    token_path: PathBuf,
    fence_dir: PathBuf,
}

impl Held {
    /// Takes `resource`'s lock in `dir`, waiting while another writer holds it.
    pub fn lock(dir: &Path, resource: &str) -> Result<Held, Error> {
        let (lock_path, token_path) = paths(dir, resource)?;
        let fence_dir = dir.join(FENCE_DIR);
        match std::fs::create_dir(&fence_dir) {
            Ok(()) => sync_dir(dir)?,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)?;
        flock(&lock, FlockOperation::LockExclusive).map_err(std::io::Error::from)?;
        Ok(Held {
            _lock: lock,
            resource: resource.to_owned(),
            token_path,
            fence_dir,
        })
    }

    /// Checks `token` against the fence and records it durably (a synced temporary file
    /// renamed over the token file, the directory synced), or refuses it with
    /// [`Error::Stale`] and changes nothing. Write only after it returned `Ok`, and before
    /// dropping the lock.
    pub fn admit(&self, token: u64, mode: Mode) -> Result<(), Error> {
        valid_token(token)?;
        let mut fence = read_fence(&self.token_path)?;
        if let Err(highest) = fence.admit(token, mode) {
            return Err(Error::Stale {
                resource: self.resource.clone(),
                highest,
                got: token,
            });
        }
        let mut recorded = tempfile::Builder::new()
            .prefix(".tenure-tmp.")
            .permissions(PermissionsExt::from_mode(0o666))
            .tempfile_in(&self.fence_dir)?;
        writeln!(recorded, "{} {}", fence.exclusive, fence.shared)?;
        recorded.as_file().sync_all()?;
        recorded.persist(&self.token_path).map_err(|e| e.error)?;
        sync_dir(&self.fence_dir)
    }
}

/// The highest token any writer has written `resource` with in `dir` (0 if none has): the
/// lowest an exclusive writer still passes with.
pub fn highest(dir: &Path, resource: &str) -> Result<u64, Error> {
    let (_, token_path) = paths(dir, resource)?;
    Ok(read_fence(&token_path)?.highest())
}

/// The lock file's and the token file's paths for `resource`. A resource's file name keeps letters, digits, `-` and `_`, and writes any other
/// byte as `%XX`.
fn paths(dir: &Path, resource: &str) -> Result<(PathBuf, PathBuf), Error> {
    let mut file = String::with_capacity(resource.len());
    for byte in resource.bytes() {
        match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => file.push(byte as char),
            other => file.push_str(&format!("%{other:02X}")),
        }
    }
    if resource.is_empty() || file.len() + ".lock".len() > MAX_FILE_NAME {
        return Err(Error::Name(format!(
            "resource {resource:?} does not fit a file name ({MAX_FILE_NAME} bytes, others as %XX)"
        )));
    }
    let fence_dir = dir.join(FENCE_DIR);
    Ok((fence_dir.join(format!("{file}.lock")), fence_dir.join(file)))
}

/// The fence a token file records (none yet: zeros).
fn read_fence(path: &Path) -> Result<Fence, Error> {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut file) => file.read_to_string(&mut text)?,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Fence::default()),
        Err(e) => return Err(e.into()),
    };
    let mut numbers = text.split_whitespace().map(str::parse::<u64>);
    match (numbers.next(), numbers.next(), numbers.next()) {
        (Some(Ok(exclusive)), Some(Ok(shared)), None) => Ok(Fence { exclusive, shared }),
        _ => Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("{} is not a token file: {text:?}", path.display()),
        )
        .into()),
    }
}

/// Makes the names in `dir` (a creation, a rename) durable.
fn sync_dir(dir: &Path) -> Result<(), Error> {
    Ok(File::open(dir)?.sync_all()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stale(result: Result<(), Error>) -> (u64, u64) {
        match result {
            Err(Error::Stale { highest, got, .. }) => (highest, got),
            other => panic!("expected a stale refusal, got {other:?}"),
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("lists")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn an_exclusive_writer_advances_the_fence_and_a_stale_one_changes_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let d = dir.path();
        write(d, "jobs/7", 5, Mode::Exclusive, "out", b"five").expect("first");
        write(d, "jobs/7", 5, Mode::Exclusive, "out", b"five again").expect("same tenure");
        write(d, "jobs/7", 9, Mode::Exclusive, "out", b"nine").expect("later tenure");
        let refused = write(d, "jobs/7", 5, Mode::Exclusive, "out", b"late");
        assert_eq!(stale(refused), (9, 5));
        assert_eq!(std::fs::read(d.join("out")).expect("reads"), b"nine");
        assert_eq!(highest(d, "jobs/7").expect("highest"), 9);
        // Made as files usually are (0666 less the umask), and a replaced file keeps its mode.
        let mode = |name: &str| d.join(name).metadata().expect("meta").permissions().mode();
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let umask = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .and_then(|m| u32::from_str_radix(m.trim(), 8).ok())
            .expect("the umask");
        assert_eq!(mode("out") & 0o777, 0o666 & !umask, "{:o}", mode("out"));
        std::fs::set_permissions(d.join("out"), PermissionsExt::from_mode(0o640)).expect("chmod");
        write(d, "jobs/7", 9, Mode::Exclusive, "out", b"nine").expect("the same tenure");
        assert_eq!(mode("out") & 0o777, 0o640);
        // No temporary file left behind, and another resource is fenced apart.
        assert_eq!(files(d), [FENCE_DIR, "out"]);
        assert_eq!(highest(d, "jobs/8").expect("highest"), 0);
        write(d, "jobs/8", 2, Mode::Exclusive, "other", b"two").expect("its own fence");
    }

    #[test]
    fn shared_writers_are_checked_against_the_exclusive_token_and_fence_out_older_ones() {
        let dir = tempfile::tempdir().expect("dir");
        let d = dir.path();
        write(d, "r", 10, Mode::Exclusive, "f", b"x").expect("exclusive");
        write(d, "r", 12, Mode::Shared, "f", b"s12").expect("co-holder");
        write(d, "r", 11, Mode::Shared, "f", b"s11").expect("another co-holder");
        assert_eq!(stale(write(d, "r", 9, Mode::Shared, "f", b"old")), (10, 9));
        // An exclusive holder whose tenure ended before the co-holders came.
        assert_eq!(
            stale(write(d, "r", 10, Mode::Exclusive, "f", b"x")),
            (12, 10)
        );
        assert_eq!(std::fs::read(d.join("f")).expect("reads"), b"s11");
    }

    #[test]
    fn bad_tokens_names_and_token_files_are_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let d = dir.path();
        std::fs::create_dir(d.join("sub")).expect("a directory");
        for name in [
            "",
            ".",
            "..",
            "a/b",
            ".tenure-fence",
            ".TENURE-tmp.x",
            "sub",
        ] {
            let refused = write(d, "r", 1, Mode::Exclusive, name, b"");
            assert!(
                matches!(refused, Err(Error::Name(_))),
                "{name:?}: {refused:?}"
            );
        }
        let refused = write(d, "r", 0, Mode::Exclusive, "f", b"");
        assert!(matches!(refused, Err(Error::Token(0))));
        let refused = write(d, &"r".repeat(300), 1, Mode::Exclusive, "f", b"");
        assert!(matches!(refused, Err(Error::Name(_))));
        assert_eq!(
            highest(d, "r").expect("reads"),
            0,
            "a refused write moves no fence"
        );
        write(d, "a b/c", 3, Mode::Exclusive, "f", b"").expect("an escaped resource");
        assert!(d.join(FENCE_DIR).join("a%20b%2Fc").exists());
        std::fs::write(d.join(FENCE_DIR).join("a%20b%2Fc"), "garbage").expect("spoils");
        let refused = write(d, "a b/c", 4, Mode::Exclusive, "f", b"");
        assert!(matches!(refused, Err(Error::Io(_))), "{refused:?}");
    }
}
