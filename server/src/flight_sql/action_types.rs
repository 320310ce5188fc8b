//! The actions Squadron answers beyond Flight SQL's own, as ListActions
//! lists them.

use arrow_flight::ActionType;

/// The action types a client may list, beyond Flight SQL's own.
pub fn extra_action_types() -> Vec<ActionType> {
    [
        ("CancelFlightInfo", "Cancel a query by its FlightInfo"),
        (
            "SetSessionOptions",
            "Set session options (catalog, schema, settings)",
        ),
        ("GetSessionOptions", "Get the session's options"),
        ("CloseSession", "End the session"),
    ]
    .into_iter()
    .map(|(r#type, description)| ActionType {
        r#type: r#type.into(),
        description: description.into(),
    })
    .collect()
}
