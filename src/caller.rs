//! The authenticated principal: who a request acts for, once `auth` has checked its
//! credential. A [`Caller`] is a person (with roles, scopes and board clearance) or a tenant API
//! key; the engine and the HTTP layer decide what it may do from these alone, without knowing how
//! it was authenticated.

use crate::config::default_person_scopes;
use crate::store::{Owner, OwnerKind, ThreadRow, Visibility};

/// The person every anonymous loopback request acts as in local development.
pub const LOCAL_PERSON: &str = "local";

/// What a caller may do (§2.2): read threads, see their content, start agents.
/// Scopes are `threads:read`, `threads:content`, `agent:<name>` and `agent:*`. Serialised as
/// their space-separated text, and read back through [`Scopes::parse`].
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(from = "String", into = "String")]
pub struct Scopes(Vec<String>);

impl From<String> for Scopes {
    fn from(text: String) -> Scopes {
        Scopes::parse(&text)
    }
}

impl From<Scopes> for String {
    fn from(scopes: Scopes) -> String {
        scopes.0.join(" ")
    }
}

impl Scopes {
    pub const READ: &'static str = "threads:read";
    pub const CONTENT: &'static str = "threads:content";

    /// Keeps the gateway's scopes among `items` (an identity provider's token carries others).
    pub fn gateway<'a>(items: impl IntoIterator<Item = &'a str>) -> Scopes {
        let mut scopes: Vec<String> = Vec::new();
        for item in items {
            let ours = item == Self::READ
                || item == Self::CONTENT
                || item.strip_prefix("agent:").is_some_and(|a| a == "*" || crate::ids::is_valid_name(a));
            if ours && !scopes.iter().any(|s| s == item) {
                scopes.push(item.to_string());
            }
        }
        Scopes(scopes)
    }

    /// Everything: the local person and a minted token without `--scopes`.
    pub fn all() -> Scopes {
        Scopes::gateway(default_person_scopes().iter().map(String::as_str))
    }

    /// A key's scopes: read and content on the tenant's threads, and the named agents.
    pub fn for_key(agents: &[String]) -> Scopes {
        let agent_scopes: Vec<String> = agents.iter().map(|a| format!("agent:{a}")).collect();
        Scopes::gateway([Self::READ, Self::CONTENT].into_iter().chain(agent_scopes.iter().map(String::as_str)))
    }

    pub fn parse(text: &str) -> Scopes {
        Scopes::gateway(text.split_whitespace())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn may_read_threads(&self) -> bool {
        self.0.iter().any(|s| s == Self::READ)
    }

    pub fn may_read_content(&self) -> bool {
        self.0.iter().any(|s| s == Self::CONTENT)
    }

    pub fn may_start(&self, agent: &str) -> bool {
        self.0.iter().any(|s| s.strip_prefix("agent:").is_some_and(|a| a == "*" || a == agent))
    }

    /// The scopes both these and `app` hold: a token exchanged by an app never reaches further
    /// than the person or the app. `agent:*` on one side keeps the other side's agents.
    pub fn shared_with(&self, app: &Scopes) -> Scopes {
        let mut shared: Vec<&str> = Vec::new();
        for scope in self.0.iter().chain(app.0.iter()) {
            let held_by_both = match scope.strip_prefix("agent:") {
                Some("*") => self.may_start_all() && app.may_start_all(),
                Some(agent) => self.may_start(agent) && app.may_start(agent),
                None => self.0.contains(scope) && app.0.contains(scope),
            };
            if held_by_both {
                shared.push(scope);
            }
        }
        Scopes::gateway(shared)
    }

    /// True when these scopes start a turn on one of `agents`: a run needs reading, content
    /// and the agent's scope (§2.2).
    pub fn may_start_any<'a>(&self, agents: impl IntoIterator<Item = &'a str>) -> bool {
        self.may_read_threads() && self.may_read_content() && agents.into_iter().any(|agent| self.may_start(agent))
    }

    fn may_start_all(&self) -> bool {
        self.0.iter().any(|s| s == "agent:*")
    }
}

impl std::fmt::Display for Scopes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(" "))
    }
}

/// A person: the subject of an app token or of an identity provider's token.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Person {
    pub id: String,
    pub roles: Vec<String>,
    pub scopes: Scopes,
    /// Labels of board notes this person may read (§7).
    pub clearance: Vec<String>,
    /// `app:<id>` when an app acts for the person (a token from the exchange).
    pub via: Option<String>,
    /// The app key that exchanged the token: revoking it withdraws the token.
    pub app_key: Option<String>,
    /// When the person's token expires (its `exp`, seconds since the epoch): an open stream
    /// ends then. `None` for a person with no token (local development, the operator's CLI).
    pub expires_at: Option<u64>,
}

/// A tenant API key: no person behind it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeyCaller {
    pub id: String,
    pub name: String,
    pub scopes: Scopes,
}

/// An authenticated caller. It serialises whole (for a grant another instance honours, such as
/// the live thread list's join token): what it may do, and what ends its access.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Caller {
    Person(Person),
    TenantKey(KeyCaller),
}

impl Caller {
    /// The local person of development mode, who may do everything.
    pub fn local() -> Caller {
        Caller::Person(Person {
            id: LOCAL_PERSON.to_string(),
            roles: Vec::new(),
            scopes: Scopes::all(),
            // The developer at the machine reads every note.
            clearance: vec!["*".into()],
            via: None,
            app_key: None,
            expires_at: None,
        })
    }

    /// Board labels this caller may read (§7); `*` is every label. A key reads unlabelled
    /// notes only.
    pub fn clearance(&self) -> &[String] {
        match self {
            Caller::Person(person) => &person.clearance,
            Caller::TenantKey(_) => &[],
        }
    }

    /// Who owns a thread this caller creates: the person, or the tenant for a key.
    pub fn owner(&self) -> Owner {
        match self {
            Caller::Person(person) => Owner { kind: OwnerKind::Person, id: person.id.clone() },
            Caller::TenantKey(_) => Owner { kind: OwnerKind::Tenant, id: String::new() },
        }
    }

    /// A person's thread is private to that person; a tenant's thread is the tenant's callers'.
    pub fn may_read(&self, thread: &ThreadRow) -> bool {
        match (&thread.owner.kind, self) {
            (OwnerKind::Person, Caller::Person(person)) => thread.owner.id == person.id,
            (OwnerKind::Person, Caller::TenantKey(_)) => false,
            (OwnerKind::Tenant, _) => true,
        }
    }

    /// The threads [`Caller::may_read`] lets this caller read, as a list of them asks the store
    /// for: the tenant's, and a person's own.
    pub fn visibility(&self) -> Visibility {
        match self {
            Caller::Person(person) => Visibility::TenantAnd(Some(person.id.clone())),
            Caller::TenantKey(_) => Visibility::TenantAnd(None),
        }
    }

    /// Who may erase a thread it may read: its owner. A person erases their own threads; a
    /// thread the tenant owns (started with an API key) is erased with a tenant API key, never
    /// by whichever person of the tenant can read it.
    pub fn may_delete(&self, thread: &ThreadRow) -> bool {
        match (&thread.owner.kind, self) {
            (OwnerKind::Person, Caller::Person(person)) => thread.owner.id == person.id,
            (OwnerKind::Tenant, Caller::TenantKey(_)) => true,
            _ => false,
        }
    }

    /// How the caller is named in records (`person:<id>` or `key:<id>`).
    pub fn label(&self) -> String {
        match self {
            Caller::Person(person) => format!("person:{}", person.id),
            Caller::TenantKey(key) => format!("key:{}", key.id),
        }
    }

    /// `app:<id>` when an app acts for the person.
    pub fn via(&self) -> Option<&str> {
        match self {
            Caller::Person(person) => person.via.as_deref(),
            Caller::TenantKey(_) => None,
        }
    }

    pub fn scopes(&self) -> &Scopes {
        match self {
            Caller::Person(person) => &person.scopes,
            Caller::TenantKey(key) => &key.scopes,
        }
    }

    pub fn is_person(&self) -> bool {
        matches!(self, Caller::Person(_))
    }

    /// The person's id; `None` for a key.
    pub fn person_id(&self) -> Option<&str> {
        match self {
            Caller::Person(person) => Some(&person.id),
            Caller::TenantKey(_) => None,
        }
    }

    /// The person's roles (from their token); none for a key.
    pub fn roles(&self) -> &[String] {
        match self {
            Caller::Person(person) => &person.roles,
            Caller::TenantKey(_) => &[],
        }
    }

    /// When the caller's credential expires (seconds since the epoch); `None`: it does not.
    pub fn expires_at(&self) -> Option<u64> {
        match self {
            Caller::Person(person) => person.expires_at,
            Caller::TenantKey(_) => None,
        }
    }

    /// The keys whose revocation withdraws this caller's access: its own, or its app's.
    pub fn revocable_keys(&self) -> Vec<String> {
        match self {
            Caller::Person(person) => person.app_key.iter().cloned().collect(),
            Caller::TenantKey(key) => vec![key.id.clone()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(kind: OwnerKind, id: &str) -> ThreadRow {
        ThreadRow {
            pk: 1,
            tenant: "t".into(),
            thread_id: "th".into(),
            owner: Owner { kind, id: id.into() },
            created_at_ms: 0,
        }
    }

    fn person(id: &str) -> Caller {
        Caller::Person(Person {
            id: id.into(),
            roles: Vec::new(),
            scopes: Scopes::all(),
            clearance: Vec::new(),
            via: None,
            app_key: None,
            expires_at: None,
        })
    }

    /// What a list shows is what `may_read` allows, thread by thread.
    fn listed(visibility: &Visibility, thread: &ThreadRow) -> bool {
        match visibility {
            Visibility::All => true,
            Visibility::TenantAnd(person) => {
                thread.owner.kind == OwnerKind::Tenant
                    || (thread.owner.kind == OwnerKind::Person && person.as_deref() == Some(thread.owner.id.as_str()))
            }
        }
    }

    #[test]
    fn a_list_shows_exactly_the_threads_a_caller_may_read() {
        let key = Caller::TenantKey(KeyCaller { id: "k".into(), name: "k".into(), scopes: Scopes::all() });
        let threads =
            [thread(OwnerKind::Person, "ann"), thread(OwnerKind::Person, "bob"), thread(OwnerKind::Tenant, "")];
        for caller in [person("ann"), person("bob"), key] {
            for thread in &threads {
                assert_eq!(listed(&caller.visibility(), thread), caller.may_read(thread), "{caller:?} {thread:?}");
            }
        }
    }

    #[test]
    fn a_caller_read_back_from_json_is_the_same_caller() {
        let key = Caller::TenantKey(KeyCaller {
            id: "k".into(),
            name: "k".into(),
            scopes: Scopes::for_key(&["demo".into()]),
        });
        let app_person = Caller::Person(Person {
            id: "ann".into(),
            roles: vec!["analyst".into()],
            scopes: Scopes::parse("threads:read agent:demo"),
            clearance: vec!["finance".into()],
            via: Some("app:crm".into()),
            app_key: Some("key-1".into()),
            expires_at: Some(1_900_000_000),
        });
        for caller in [key, app_person, Caller::local()] {
            let text = serde_json::to_string(&caller).expect("serialises");
            assert_eq!(serde_json::from_str::<Caller>(&text).expect("reads back"), caller, "{text}");
        }
    }

    #[test]
    fn only_a_threads_owner_erases_it() {
        let key = Caller::TenantKey(KeyCaller { id: "k".into(), name: "k".into(), scopes: Scopes::all() });
        assert!(person("ann").may_delete(&thread(OwnerKind::Person, "ann")));
        assert!(!person("bob").may_delete(&thread(OwnerKind::Person, "ann")));
        assert!(!person("ann").may_delete(&thread(OwnerKind::Tenant, "")));
        assert!(key.may_delete(&thread(OwnerKind::Tenant, "")));
        assert!(!key.may_delete(&thread(OwnerKind::Person, "ann")));
    }
}
