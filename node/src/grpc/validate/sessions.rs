//! Sessions (SPEC §4.24): create, renew, close, read and list them.

use super::*;
use crate::lease::command::{CloseSessionOp, CreateSessionOp, RenewSessionOp};
use crate::lease::session::{parse_session_id, session_name};

/// A session id as `CreateSession` answered it: `ses_<n>`.
pub fn session_id(value: &str) -> Result<String, ApiError> {
    if value.is_empty() {
        return Err(ApiError::invalid("session_id", "is required"));
    }
    match parse_session_id(value) {
        Some(id) => Ok(session_name(id.get())),
        None => Err(ApiError::invalid(
            "session_id",
            "must be ses_<number>, as CreateSession answered",
        )),
    }
}

pub fn create_session(req: &pb::CreateSessionRequest) -> Result<CreateSessionOp, ApiError> {
    let holder = name("holder", &req.holder)?;
    let ttl_ms = ttl("ttl", req.ttl.as_ref())?;
    let metadata = req.metadata.clone().into_iter().collect();
    policy::check_metadata(&metadata, MAX_METADATA_BYTES)?;
    Ok(CreateSessionOp {
        holder,
        ttl_ms,
        metadata,
    })
}

pub fn renew_session(req: &pb::RenewSessionRequest) -> Result<RenewSessionOp, ApiError> {
    Ok(RenewSessionOp {
        session_id: session_id(&req.session_id)?,
    })
}

pub fn close_session(req: &pb::CloseSessionRequest) -> Result<CloseSessionOp, ApiError> {
    Ok(CloseSessionOp {
        session_id: session_id(&req.session_id)?,
    })
}

pub fn get_session(req: &pb::GetSessionRequest) -> Result<(Query, bool), ApiError> {
    let id = session_id(&req.session_id)?;
    let id = parse_session_id(&id).map_or(0, |id| id.get());
    Ok((Query::Session { id }, stale(req.consistency)?))
}

pub fn list_sessions(req: &pb::ListSessionsRequest) -> Result<(Query, bool), ApiError> {
    let (holder, principal) = super::reads::holder_and_principal(&req.holder, &req.principal)?;
    let after = match req.page_token.as_str() {
        "" => 0,
        token => parse_session_id(token).ok_or_else(bad_page_token)?.get(),
    };
    Ok((
        Query::Sessions {
            principal,
            holder,
            page_size: page_size(req.page_size)?,
            after,
        },
        stale(req.consistency)?,
    ))
}
