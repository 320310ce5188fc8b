//! The Flight session actions: `SetSessionOptions`, `GetSessionOptions`,
//! `CloseSession`.
//!
//! arrow-flight generates no types for them, so the messages of
//! `Flight.proto` are declared here with prost. Their action bodies and
//! results are the bare messages (not `Any`-wrapped like Flight SQL's).
//!
//! Options: `catalog` and `schema` (where unqualified names resolve), and
//! any DataFusion setting a client may change (`SET`), by its full key.

use std::collections::HashMap;

use squadron_common::error::{Error, ErrorKind};
use tonic::Status;

use super::sessions::{Caller, Sessions};
use squadron_coordinator::session::Session;

pub const SET_SESSION_OPTIONS: &str = "SetSessionOptions";
pub const GET_SESSION_OPTIONS: &str = "GetSessionOptions";
pub const CLOSE_SESSION: &str = "CloseSession";

#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionOptionValue {
    #[prost(oneof = "OptionValue", tags = "1, 2, 3, 4, 5")]
    pub option_value: Option<OptionValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StringListValue {
    #[prost(string, repeated, tag = "1")]
    pub values: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum OptionValue {
    #[prost(string, tag = "1")]
    StringValue(String),
    #[prost(bool, tag = "2")]
    BoolValue(bool),
    #[prost(sfixed64, tag = "3")]
    Int64Value(i64),
    #[prost(double, tag = "4")]
    DoubleValue(f64),
    #[prost(message, tag = "5")]
    StringListValue(StringListValue),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SetSessionOptionsRequest {
    #[prost(map = "string, message", tag = "1")]
    pub session_options: HashMap<String, SessionOptionValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SetSessionOptionsResult {
    #[prost(map = "string, message", tag = "1")]
    pub errors: HashMap<String, SetSessionOptionError>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SetSessionOptionError {
    #[prost(enumeration = "SetSessionOptionErrorValue", tag = "1")]
    pub value: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum SetSessionOptionErrorValue {
    Unspecified = 0,
    InvalidName = 1,
    InvalidValue = 2,
    Error = 3,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetSessionOptionsResult {
    #[prost(map = "string, message", tag = "1")]
    pub session_options: HashMap<String, SessionOptionValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CloseSessionResult {
    #[prost(enumeration = "CloseSessionStatus", tag = "1")]
    pub status: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum CloseSessionStatus {
    Unspecified = 0,
    Closed = 1,
    Closing = 2,
    NotCloseable = 3,
}

const CATALOG: &str = "catalog";
const SCHEMA: &str = "schema";

/// Applies the options of `request` to the caller's session (opened if
/// it has none); an option that cannot be set is reported by name and
/// changes nothing. Returns the result and the session's id.
pub fn set_options(
    sessions: &Sessions,
    caller: &Caller,
    request: SetSessionOptionsRequest,
) -> Result<(SetSessionOptionsResult, String), Status> {
    let (session, id) = sessions.open(caller)?;
    let mut errors = HashMap::new();
    // Catalog before schema: the schema is looked up in the new catalog.
    let mut options: Vec<_> = request.session_options.into_iter().collect();
    options.sort_by_key(|(name, _)| (name != CATALOG, name.clone()));
    for (name, value) in options {
        if let Err(error) = set_option(&session, &name, value.option_value) {
            tracing::debug!(name, "session option refused: {error}");
            let value = match error.kind() {
                ErrorKind::PermissionDenied | ErrorKind::NotFound => {
                    SetSessionOptionErrorValue::InvalidName
                }
                ErrorKind::InvalidArgument if !session.has_setting(setting_key(&name)) => {
                    SetSessionOptionErrorValue::InvalidName
                }
                ErrorKind::InvalidArgument => SetSessionOptionErrorValue::InvalidValue,
                _ => SetSessionOptionErrorValue::Error,
            };
            errors.insert(
                name,
                SetSessionOptionError {
                    value: value as i32,
                },
            );
        }
    }
    Ok((SetSessionOptionsResult { errors }, id))
}

/// The setting an option name stands for: the catalog and schema are
/// DataFusion's defaults, the rest are settings by key.
fn setting_key(name: &str) -> &str {
    match name {
        CATALOG => "datafusion.catalog.default_catalog",
        SCHEMA => "datafusion.catalog.default_schema",
        other => other,
    }
}

fn set_option(session: &Session, name: &str, value: Option<OptionValue>) -> Result<(), Error> {
    let key = setting_key(name);
    let text = match value {
        // An unset value removes the option: back to the server's.
        None => return session.reset(key),
        Some(OptionValue::StringValue(s)) => s,
        Some(OptionValue::BoolValue(b)) => b.to_string(),
        Some(OptionValue::Int64Value(i)) => i.to_string(),
        Some(OptionValue::DoubleValue(d)) => d.to_string(),
        Some(OptionValue::StringListValue(_)) => {
            return Err(Error::invalid_argument(format!(
                "{name} takes one value, not a list"
            )))
        }
    };
    if name == CATALOG {
        session.set_catalog(&text)
    } else {
        session.set(key, &text)
    }
}

/// The caller's catalog and schema, and the settings it changed.
pub fn get_options(sessions: &Sessions, caller: &Caller) -> GetSessionOptionsResult {
    let session = sessions.current(caller);
    let string = |s: String| SessionOptionValue {
        option_value: Some(OptionValue::StringValue(s)),
    };
    let mut options: HashMap<String, SessionOptionValue> = session
        .changed_settings()
        .into_iter()
        .map(|(k, v)| (k, string(v)))
        .collect();
    options.insert(CATALOG.into(), string(session.catalog()));
    options.insert(SCHEMA.into(), string(session.schema()));
    GetSessionOptionsResult {
        session_options: options,
    }
}

/// Ends the caller's session (it falls back to the server's defaults).
pub fn close(sessions: &Sessions, caller: &Caller) -> CloseSessionResult {
    sessions.close(caller);
    CloseSessionResult {
        status: CloseSessionStatus::Closed as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::tickets::HandleSigner;
    use datafusion::prelude::SessionContext;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_refused_option_says_whether_its_name_or_its_value_is_wrong() {
        let shared = Arc::new(Session::shared(SessionContext::new()));
        let signer = Arc::new(HandleSigner::random());
        let sessions = Sessions::new(shared, signer, Duration::from_secs(60), 8);
        let string = |s: &str| SessionOptionValue {
            option_value: Some(OptionValue::StringValue(s.into())),
        };
        let options = [
            ("datafusion.execution.batch_size", "1024"),
            ("datafusion.execution.no_such_setting", "1"),
            ("datafusion.execution.batch_size_typo", "1"),
            ("datafusion.optimizer.max_passes", "many"),
            ("datafusion.runtime.memory_limit", "1G"),
        ];
        let request = SetSessionOptionsRequest {
            session_options: options
                .iter()
                .map(|(name, value)| (name.to_string(), string(value)))
                .collect(),
        };
        let caller = Caller::for_user("alice");
        let (result, _) = set_options(&sessions, &caller, request).unwrap();
        let refused = |name: &str| {
            result
                .errors
                .get(name)
                .map(|e| SetSessionOptionErrorValue::try_from(e.value).unwrap())
        };
        assert_eq!(refused("datafusion.execution.batch_size"), None);
        for unknown in [
            "datafusion.execution.no_such_setting",
            "datafusion.execution.batch_size_typo",
        ] {
            assert_eq!(
                refused(unknown),
                Some(SetSessionOptionErrorValue::InvalidName),
                "{unknown}"
            );
        }
        assert_eq!(
            refused("datafusion.optimizer.max_passes"),
            Some(SetSessionOptionErrorValue::InvalidValue)
        );
        assert_eq!(
            refused("datafusion.runtime.memory_limit"),
            Some(SetSessionOptionErrorValue::InvalidName)
        );
    }
}
