//! The release before this build, for mixed-version runs (`--nemesis upgrade`, `tenure-jepsen
//! upgrade`): found in CHANGELOG.md (the newest entry with a `Commit:` line), checked out from
//! the clone's own history into a git worktree under the target directory, and built there
//! with the target directory this build uses, so the dependencies compiled for this build are
//! reused and only Tenure's own crates compile again. The binary is kept under
//! `target/releases/<version>/<profile>/` with the commit it was built from, and built again
//! only when that commit changes.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The clone this runs in: the nearest directory holding CHANGELOG.md, from the working
/// directory up.
pub fn repository() -> Result<PathBuf> {
    let here = std::env::current_dir()?;
    here.ancestors()
        .find(|dir| dir.join("CHANGELOG.md").is_file() && dir.join(".git").exists())
        .map(Path::to_path_buf)
        .context("no clone of Tenure (CHANGELOG.md and .git) here or above: run from the repository, or give --old-bin")
}

/// A release as CHANGELOG.md records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub version: String,
    pub commit: String,
}

/// The newest release CHANGELOG.md names a commit for (the head's own entry has none).
pub fn previous(changelog: &str) -> Option<Release> {
    let mut version = None;
    for line in changelog.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            version = heading.split_whitespace().next().map(str::to_string);
        } else if let (Some(v), Some(rest)) = (&version, line.strip_prefix("Commit: ")) {
            let commit: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            if commit.len() >= 7 {
                return Some(Release {
                    version: v.clone(),
                    commit,
                });
            }
        }
    }
    None
}

fn run(command: &mut Command, what: &str) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("{what}: {command:?}"))?;
    if !status.success() {
        bail!("{what} failed ({status}): {command:?}");
    }
    Ok(())
}

/// The `tenured` of the release before this build (with fault injection, as the harness needs),
/// built if it is not built yet. `repo` is the clone (CHANGELOG.md at its top); `current` is
/// this build's `tenured`, whose directory names the target directory and profile to use.
pub fn previous_tenured(repo: &Path, current: &Path) -> Result<(Release, PathBuf)> {
    let changelog = std::fs::read_to_string(repo.join("CHANGELOG.md"))
        .with_context(|| format!("reading {}/CHANGELOG.md", repo.display()))?;
    let release = previous(&changelog)
        .context("CHANGELOG.md names no release with a commit: no release before this one")?;
    let current = current
        .canonicalize()
        .with_context(|| format!("finding {}", current.display()))?;
    let profile_dir = current
        .parent()
        .context("the current tenured has no directory")?;
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .context("the current tenured's directory has no name")?
        .to_string();
    let target = profile_dir
        .parent()
        .context("the current tenured is not in a target directory")?;
    let home = target.join("releases").join(&release.version);
    let bin = home.join(&profile).join("tenured");
    let stamp = home.join(&profile).join("commit");
    std::fs::create_dir_all(home.join(&profile))?;
    // One build at a time: two runs share the worktree and the binary this build's own is
    // moved aside from.
    let lock = std::fs::File::create(home.join(".lock"))?;
    lock.lock()
        .context("waiting for another build of the release before")?;
    if bin.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&release.commit) {
        return Ok((release, bin));
    }
    let source = home.join("src");
    worktree(repo, &source, &release.commit)?;
    // The build writes `<target>/<profile>/tenured` too: this build's is kept aside and put
    // back, and checked to be back.
    let built = target.join(&profile).join("tenured");
    let kept = home.join(format!("current-tenured.{}.tmp", std::process::id()));
    let had_current = built.is_file();
    if had_current {
        std::fs::copy(&built, &kept).context("keeping the current tenured aside")?;
    }
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .arg("build")
        .arg("--manifest-path")
        .arg(source.join("Cargo.toml"))
        .args([
            "-p",
            "tenure-node",
            "--features",
            "fault-injection",
            "--bin",
            "tenured",
        ])
        .env("CARGO_TARGET_DIR", target);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cargo.arg("--release");
        }
        other => {
            cargo.args(["--profile", other]);
        }
    }
    tracing::info!(version = %release.version, commit = %release.commit, "building the previous release's tenured");
    let result = run(&mut cargo, "building the previous release");
    // Whole or not at all: a temporary name, then renamed into place.
    let partial = bin.with_extension("tmp");
    let copied = result.and_then(|()| {
        std::fs::copy(&built, &partial).context("keeping the previous release's tenured")?;
        std::fs::rename(&partial, &bin)?;
        Ok(())
    });
    if had_current {
        std::fs::rename(&kept, &built).context("putting the current tenured back")?;
        anyhow::ensure!(
            std::fs::read(&built)? != std::fs::read(&bin).unwrap_or_default(),
            "{} is the previous release's tenured after its build: build this one again",
            built.display()
        );
    }
    copied?;
    std::fs::write(&stamp, &release.commit)?;
    Ok((release, bin))
}

/// `source` as a worktree of `repo` at `commit`: added, or checked out again (a leftover
/// that is no worktree of its own, or one git forgot, is made again).
fn worktree(repo: &Path, source: &Path, commit: &str) -> Result<()> {
    let own = source.exists()
        && Command::new("git")
            .arg("-C")
            .arg(source)
            .args(["rev-parse", "--show-toplevel"])
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|top| PathBuf::from(top.trim()).canonicalize().ok())
            == source.canonicalize().ok();
    if own {
        return run(
            Command::new("git")
                .arg("-C")
                .arg(source)
                .args(["checkout", "--quiet", "--force", "--detach", commit]),
            "checking out the previous release",
        );
    }
    if source.exists() {
        std::fs::remove_dir_all(source)
            .with_context(|| format!("removing {}", source.display()))?;
    }
    run(
        Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["worktree", "prune"]),
        "pruning forgotten worktrees",
    )?;
    run(
        Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["worktree", "add", "--quiet", "--force", "--detach"])
            .arg(source)
            .arg(commit),
        "adding a worktree of the previous release",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_release_is_the_newest_with_a_commit() {
        let changelog = "# Changelog\n\n## 0.3.0 (unreleased: the head)\n\nstuff\n\n## 0.2.0\n\nCommit: abcdef1234. Rules 1 to 2.\n\n## 0.1.0\n\nCommit: 0123456.\n";
        assert_eq!(
            previous(changelog),
            Some(Release {
                version: "0.2.0".into(),
                commit: "abcdef1234".into()
            })
        );
        assert_eq!(previous("## 0.1.0 (unreleased)\n"), None);
    }

    #[test]
    fn this_repositorys_changelog_names_a_previous_release() {
        let changelog = include_str!("../../CHANGELOG.md");
        let release = previous(changelog).expect("a release with a commit");
        assert!(release.version.starts_with("0."), "{release:?}");
    }
}
