//! What a handler takes, and what it answers when it cannot: [`ApiError`] (a status and the
//! JSON `{"error", "field"?}` every error has), query parameters and path segments refused with
//! it, and the request body, size-checked before it is read and then parsed ([`JsonBody`]).

use axum::body::to_bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::json;

use mindfleet_core::knowledge::RagError;
use mindfleet_core::messages::InjectError;

use super::HttpState;

/// The JSON every error has, with its status.
pub(super) fn error(status: StatusCode, message: impl Into<String>, field: Option<&str>) -> Response {
    let mut body = json!({ "error": message.into() });
    if let Some(f) = field {
        body["field"] = json!(f);
    }
    (status, axum::Json(body)).into_response()
}

/// A request the API cannot take or answer: 400 (unless said otherwise) with the JSON every
/// error has, naming the query parameter, path segment, header or body field where one is known.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ApiError {
    pub(super) status: StatusCode,
    pub(super) message: String,
    pub(super) field: Option<String>,
}

impl ApiError {
    /// A bad request (400), naming `field` where one is known.
    pub(super) fn new(message: impl Into<String>, field: Option<&str>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, message: message.into(), field: field.map(str::to_string) }
    }

    /// `status`, naming no field.
    pub(super) fn with_status(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), field: None }
    }

    /// Nothing there (404).
    pub(super) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::with_status(StatusCode::NOT_FOUND, message)
    }

    /// Cannot be answered now (503).
    pub(super) fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::with_status(StatusCode::SERVICE_UNAVAILABLE, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let too_large = self.status == StatusCode::PAYLOAD_TOO_LARGE;
        let mut response = error(self.status, self.message, self.field.as_deref());
        if too_large {
            // Refused unread: the connection ends with this answer, and says so, so that no client
            // sends its next request into it.
            response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
        }
        response
    }
}

impl From<InjectError> for ApiError {
    fn from(e: InjectError) -> ApiError {
        let status = match &e {
            InjectError::Invalid(_) => StatusCode::BAD_REQUEST,
            InjectError::NotFound(_) => StatusCode::NOT_FOUND,
            InjectError::QueueFull { .. } => StatusCode::TOO_MANY_REQUESTS,
            InjectError::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
            InjectError::NoSpace(_) => StatusCode::INSUFFICIENT_STORAGE,
            InjectError::ShuttingDown | InjectError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError::with_status(status, e.to_string())
    }
}

impl From<RagError> for ApiError {
    fn from(e: RagError) -> ApiError {
        let status = match &e {
            RagError::Invalid(_) => StatusCode::BAD_REQUEST,
            RagError::Forbidden(_) => StatusCode::FORBIDDEN,
            RagError::NotFound(_) => StatusCode::NOT_FOUND,
            RagError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::with_status(status, e.to_string())
    }
}

/// An actor's answer to a handler's call: its refusal as the API's error, or 503 naming `who`
/// when the call failed (the actor is gone, or did not answer in time).
pub(super) fn answer<T, E: Into<ApiError>>(
    who: &str,
    called: Result<Result<T, E>, impl std::fmt::Display>,
) -> Result<T, ApiError> {
    called.map_err(|e| ApiError::unavailable(format!("{who} unavailable: {e}")))?.map_err(Into::into)
}

/// The query string as `T`, or the parameter that is wrong and why.
pub(super) fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        match field.as_str() {
            "" | "." => ApiError::new(format!("query string: {}", e.inner()), None),
            f => ApiError::new(format!("query parameter `{f}`: {}", e.inner()), Some(f)),
        }
    })
}

/// Query parameters, refused with a JSON error that names the one that is wrong (axum's
/// `Query` answers plain text).
pub(super) struct Params<T>(pub(super) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parse_query(parts.uri.query().unwrap_or("")).map(Params)
    }
}

/// Path segments, refused with a JSON error (axum's `Path` answers plain text).
pub(super) struct Segments<T>(pub(super) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Segments<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(Segments(v)),
            Err(e) => Err(ApiError::with_status(e.status(), e.body_text())),
        }
    }
}

/// The request body as text. Over the API's limit it is refused (413) by its `Content-Length`
/// before anything is read, else as soon as reading passes the limit; cut short, badly framed
/// or not UTF-8, it is a bad request (400).
pub(super) struct Text(pub(super) String);

impl FromRequest<HttpState> for Text {
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &HttpState) -> Result<Text, ApiError> {
        let max = st.max_body;
        let too_big = || {
            ApiError::with_status(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body is larger than the limit of {max} bytes"),
            )
        };
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|len| len > max) {
            return Err(too_big());
        }
        let bytes = to_bytes(req.into_body(), max).await.map_err(|e| match body_error(&e) {
            BodyError::TooLarge => too_big(),
            BodyError::Malformed(why) => ApiError::new(why, None),
        })?;
        String::from_utf8(bytes.to_vec()).map(Text).map_err(|_| ApiError::new("body is not UTF-8", None))
    }
}

/// A request body a handler takes: how it is parsed from the (size-checked) text, and how a
/// bad one is refused.
pub(super) trait FromBody: Sized {
    fn from_body(text: &str) -> Result<Self, ApiError>;
}

/// `text` as JSON of `T`, refused as `"{invalid}: {why}"` (400).
pub(super) fn json_body<T: DeserializeOwned>(text: &str, invalid: &str) -> Result<T, ApiError> {
    serde_json::from_str(text).map_err(|e| ApiError::new(format!("{invalid}: {e}"), None))
}

/// The body, size-checked and read ([`Text`]), then parsed ([`FromBody`]).
pub(super) struct JsonBody<T>(pub(super) T);

impl<T: FromBody> FromRequest<HttpState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &HttpState) -> Result<JsonBody<T>, ApiError> {
        let Text(text) = Text::from_request(req, st).await?;
        T::from_body(&text).map(JsonBody)
    }
}

/// Why a body could not be read.
#[derive(Debug, PartialEq)]
pub(super) enum BodyError {
    /// Over the limit (413).
    TooLarge,
    /// Cut short or badly framed (400), and how.
    Malformed(String),
}

/// Tells a body over the limit (`LengthLimitError`, somewhere in the chain) from one cut short
/// (before its `Content-Length` or inside a chunk) or badly framed (a chunk size that is not hex).
pub(super) fn body_error(e: &(dyn std::error::Error + 'static)) -> BodyError {
    let mut cause = Some(e);
    let mut io_kind = None;
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return BodyError::TooLarge;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            io_kind = Some((io.kind(), io.to_string()));
        }
        cause = c.source();
    }
    BodyError::Malformed(match io_kind {
        Some((std::io::ErrorKind::UnexpectedEof, _)) => {
            "body ended before its declared length (Content-Length or chunk size)".to_string()
        }
        Some((_, why)) => format!("malformed body: {why}"),
        None => format!("cannot read the body: {e}"),
    })
}
