//! Who is calling. A request's [`Caller`] is established from its parts before the body is
//! read (§2.1), and every thread access is decided by [`Caller::may_read`].
//!
//! Until tokens and API keys are configured, the gateway accepts callers only from loopback,
//! each as the local person `local`: safe on a developer's machine, useless on the internet.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;

use crate::store::{Owner, OwnerKind, ThreadRow};

/// The person every loopback request acts as while no authentication is configured.
pub const LOCAL_PERSON: &str = "local";

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A person (an app token acting for them, or their own token).
    Person { id: String },
    /// A tenant API key: no person behind it.
    TenantKey { id: String },
}

impl Caller {
    /// Who owns a thread this caller creates: the person, or the tenant for a key.
    pub fn owner(&self) -> Owner {
        match self {
            Caller::Person { id } => Owner { kind: OwnerKind::Person, id: id.clone() },
            Caller::TenantKey { .. } => Owner { kind: OwnerKind::Tenant, id: String::new() },
        }
    }

    /// A person's thread is private to that person; a tenant's thread is the tenant's callers'.
    pub fn may_read(&self, thread: &ThreadRow) -> bool {
        match (&thread.owner.kind, self) {
            (OwnerKind::Person, Caller::Person { id }) => thread.owner.id == *id,
            (OwnerKind::Person, Caller::TenantKey { .. }) => false,
            (OwnerKind::Tenant, _) => true,
        }
    }

    /// How the caller is named in records (`person:<id>` or `key:<id>`).
    pub fn label(&self) -> String {
        match self {
            Caller::Person { id } => format!("person:{id}"),
            Caller::TenantKey { id } => format!("key:{id}"),
        }
    }
}

/// Why a caller was not accepted (401 `unauthenticated`).
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("this gateway has no authentication configured and accepts requests only from loopback")]
    NotLoopback,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = crate::http::ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|info| info.0);
        match peer {
            Some(address) if address.ip().is_loopback() => Ok(Caller::Person { id: LOCAL_PERSON.to_string() }),
            _ => Err(AuthError::NotLoopback.into()),
        }
    }
}
