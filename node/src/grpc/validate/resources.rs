//! A registration and its policy (SPEC §4.13), and an admin's quota change.

use super::*;

pub fn set_quota(req: &pb::SetQuotaRequest) -> Result<SetQuotaOp, ApiError> {
    let principal = quota_principal(&req.principal)?;
    if req.changes.is_empty() {
        return Err(ApiError::invalid("changes", "name at least one quota"));
    }
    let mut changes = Vec::with_capacity(req.changes.len());
    for change in &req.changes {
        let Some(quota) = Quota::from_name(&change.quota) else {
            let known: Vec<&str> = quota::ALL.iter().map(|q| q.name()).collect();
            return Err(ApiError::invalid(
                "changes.quota",
                format!(
                    "{:?} is not a quota (one of {})",
                    change.quota,
                    known.join(", ")
                ),
            ));
        };
        if changes.iter().any(|(q, _)| *q == quota) {
            return Err(ApiError::invalid(
                "changes.quota",
                format!("{} is named twice", quota.name()),
            ));
        }
        changes.push((quota, (!change.reset).then_some(change.limit)));
    }
    Ok(SetQuotaOp { principal, changes })
}

/// A registered policy: absent fields take the registered defaults of SPEC §4.13.
pub fn policy(
    value: Option<&pb::Policy>,
    kind: &str,
    display_name: &str,
) -> Result<Policy, ApiError> {
    let defaults = Policy::registered();
    let p = value.cloned().unwrap_or_default();
    let or = |field: &str, d: Option<&prost_types::Duration>, default: u64| {
        duration_ms(field, d).map(|ms| ms.unwrap_or(default))
    };
    let mut shared_modes = p
        .shared_modes
        .iter()
        .map(|m| match mode(*m)? {
            Mode::Exclusive => Err(ApiError::invalid(
                "policy.shared_modes",
                "may list READ and WRITE only",
            )),
            shared => Ok(shared),
        })
        .collect::<Result<Vec<_>, _>>()?;
    shared_modes.sort();
    shared_modes.dedup();
    let mut fsm_requirements: Vec<FsmRequirement> = p
        .fsm_requirements
        .iter()
        .map(|r| FsmRequirement {
            machine: r.machine.clone(),
            transition: r.transition.clone(),
        })
        .collect();
    fsm_requirements.sort();
    fsm_requirements.dedup();
    let pick = |top: &str, inner: String| {
        if top.is_empty() {
            inner
        } else {
            top.to_string()
        }
    };
    let mut policy = Policy {
        bookable: p.bookable,
        max_holders: p.max_holders,
        default_ttl_ms: or("policy.default_ttl", p.default_ttl.as_ref(), 0)?,
        max_ttl_ms: or("policy.max_ttl", p.max_ttl.as_ref(), defaults.max_ttl_ms)?,
        max_lifetime_ms: or("policy.max_lifetime", p.max_lifetime.as_ref(), 0)?,
        renewal_grace_ms: or(
            "policy.renewal_grace",
            p.renewal_grace.as_ref(),
            defaults.renewal_grace_ms,
        )?,
        transferable: p.transferable,
        shared_modes,
        total_units: p.total_units,
        lock_delay_ms: or("policy.lock_delay", p.lock_delay.as_ref(), 0)?,
        max_waiters: match p.max_waiters {
            0 => defaults.max_waiters,
            n => n,
        },
        max_metadata_bytes: match p.max_metadata_bytes {
            0 => defaults.max_metadata_bytes,
            n => n,
        },
        kind: pick(kind, p.kind),
        display_name: pick(display_name, p.display_name),
        fsm_requirements,
    };
    if p.default_ttl.is_none() {
        // The registered default (1 h), but never more than the policy lets a lease hold: a
        // policy capping max_ttl or max_lifetime below 1 h needs no default_ttl of its own.
        policy.default_ttl_ms = defaults.default_ttl_ms.min(policy.ttl_ceiling_ms());
    }
    policy.check()?;
    Ok(policy)
}

pub fn create_resource(req: &pb::CreateResourceRequest) -> Result<CreateOp, ApiError> {
    let name = if req.name.is_empty() {
        None
    } else {
        Some(name("name", &req.name)?)
    };
    label("kind", &req.kind, true)?;
    label("display_name", &req.display_name, true)?;
    Ok(CreateOp {
        name,
        policy: policy(req.policy.as_ref(), &req.kind, &req.display_name)?,
    })
}
