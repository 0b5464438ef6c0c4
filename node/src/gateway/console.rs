//! The web console (SPEC §2.7): a page and its script and style, built into the binary and
//! served by the gateway at `/`. The page is only a client of the gateway's own API: it holds
//! no secret and needs no token to load; every call it makes carries the token the user gave
//! it, and the API decides what that token may see and do.
//!
//! Each asset is sent with a content security policy that lets the page load nothing but these
//! assets and call nothing but its own origin, and that no other site may frame.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, Method, StatusCode};

const INDEX: &str = include_str!("../../console/index.html");
const SCRIPT: &str = include_str!("../../console/console.js");
const STYLE: &str = include_str!("../../console/console.css");

/// What the console's pages may load and call: their own origin, nothing else.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The console's assets: path, content type, content.
const ASSETS: [(&str, &str, &str); 3] = [
    ("/", "text/html; charset=utf-8", INDEX),
    (
        "/console/console.js",
        "text/javascript; charset=utf-8",
        SCRIPT,
    ),
    ("/console/console.css", "text/css; charset=utf-8", STYLE),
];

/// Whether `path` is one of the console's.
pub fn is_console(path: &str) -> bool {
    ASSETS.iter().any(|(p, _, _)| *p == path)
}

/// The asset at `path` (one of [`is_console`]'s), for `GET` and `HEAD`.
pub fn serve(method: &Method, path: &str) -> Response {
    let Some((_, content_type, content)) = ASSETS.iter().find(|(p, _, _)| *p == path) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if method != Method::GET && method != Method::HEAD {
        return super::no_route(
            method,
            path,
            super::routes::NoRoute::Method(vec![Method::GET, Method::HEAD]),
        );
    }
    let mut response = (StatusCode::OK, *content).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, *content_type),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-cache"),
        // A page of another site that opened the console keeps no handle on it.
        (
            header::HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
        (
            header::HeaderName::from_static("cross-origin-resource-policy"),
            "same-origin",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_assets() {
        for (path, _, _) in &ASSETS[1..] {
            assert!(INDEX.contains(path), "the page does not load {path}");
        }
        assert!(!INDEX.contains("http://") && !INDEX.contains("https://"));
        assert!(!SCRIPT.contains("innerHTML"), "the script writes no markup");
        assert!(!SCRIPT.contains("eval("));
    }

    #[test]
    fn an_asset_carries_the_policy() {
        let response = serve(&Method::GET, "/console/console.js");
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers();
        assert_eq!(
            headers[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY
        );
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(
            serve(&Method::POST, "/").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert!(!is_console("/console/other.js"));
    }
}
