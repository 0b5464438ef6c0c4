//! Leases as the clients see them: their modes, the leases answers show, and the resource
//! policies the checker needs.

use serde::{Deserialize, Serialize};

/// A lease's mode (SPEC §1): exclusive, or one of the shared modes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Exclusive,
    Read,
    Write,
}

impl Mode {
    pub fn is_exclusive(&self) -> bool {
        *self == Mode::Exclusive
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Read => "read",
            Mode::Write => "write",
        }
    }

    /// `X`, `R`, `W`: for labels.
    pub fn letter(self) -> &'static str {
        match self {
            Mode::Exclusive => "X",
            Mode::Read => "R",
            Mode::Write => "W",
        }
    }
}

pub(super) fn is_zero(n: &u64) -> bool {
    *n == 0
}

pub(super) fn is_false(b: &bool) -> bool {
    !*b
}

/// The part of a resource's policy the checker needs (SPEC §1). Resources without a recorded
/// policy are ad hoc: exclusive only, no pool, not transferable, no renewal grace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourcePolicy {
    #[serde(default)]
    pub shared_modes: Vec<Mode>,
    #[serde(default)]
    pub total_units: u64,
    #[serde(default)]
    pub transferable: bool,
    #[serde(default)]
    pub renewal_grace_ms: u64,
    #[serde(default)]
    pub default_ttl_ms: u64,
    #[serde(default)]
    pub max_ttl_ms: u64,
}

impl Default for ResourcePolicy {
    /// The ad-hoc policy (SPEC §4.13).
    fn default() -> Self {
        ResourcePolicy {
            shared_modes: Vec::new(),
            total_units: 0,
            transferable: false,
            renewal_grace_ms: 0,
            default_ttl_ms: 60_000,
            max_ttl_ms: 86_400_000,
        }
    }
}

impl ResourcePolicy {
    pub fn allows(&self, mode: Mode) -> bool {
        mode == Mode::Exclusive || self.shared_modes.contains(&mode)
    }

    /// The units a lease in `mode` asking for `units` draws from the pool (the node's rule:
    /// 0 for exclusive leases or without a pool, else at least 1).
    pub fn effective_units(&self, mode: Mode, units: u64) -> u64 {
        if mode == Mode::Exclusive || self.total_units == 0 {
            0
        } else {
            units.max(1)
        }
    }

    /// `shared read+write, 4 units, transferable, grace 500ms`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.shared_modes.is_empty() {
            parts.push("exclusive only".to_string());
        } else {
            let modes: Vec<&str> = self.shared_modes.iter().map(|m| m.name()).collect();
            parts.push(format!("shared {}", modes.join("+")));
        }
        if self.total_units > 0 {
            parts.push(format!("{} units", self.total_units));
        }
        if self.transferable {
            parts.push("transferable".into());
        }
        if self.renewal_grace_ms > 0 {
            parts.push(format!("grace {}ms", self.renewal_grace_ms));
        }
        parts.join(", ")
    }
}

/// One live lease as an answer showed it (a read, a refusal, a listing).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub holder: String,
    pub token: u64,
    #[serde(default, skip_serializing_if = "Mode::is_exclusive")]
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub units: u64,
    /// Status `GRACE`: past its expiry, inside the renewal grace.
    #[serde(default, skip_serializing_if = "is_false")]
    pub grace: bool,
}

impl Held {
    /// `c3 token 17 (read 2u, grace)`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} token {}", self.holder, self.token);
        let mut extra = Vec::new();
        if !self.mode.is_exclusive() {
            extra.push(if self.units > 0 {
                format!("{} {}u", self.mode.name(), self.units)
            } else {
                self.mode.name().to_string()
            });
        }
        if self.grace {
            extra.push("grace".to_string());
        }
        if !extra.is_empty() {
            s.push_str(&format!(" ({})", extra.join(", ")));
        }
        s
    }
}

pub(super) fn list(leases: &[Held]) -> String {
    leases
        .iter()
        .map(Held::describe)
        .collect::<Vec<_>>()
        .join(", ")
}
