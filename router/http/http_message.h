#pragma once
// Plain HTTP request and response values exchanged between the router's HTTP server
// (router/http/http_server.h) and its handlers. Independent of Boost.Beast, so handlers and
// their tests never see the transport's types.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltaserve::router::http {

// One header field. Names keep the case the peer sent; lookups ignore case.
struct HeaderField {
  std::string name;
  std::string value;
};

// A fully read request: header and body (the body is complete, within the size limit).
struct Request {
  std::string method;  // "GET", "POST", ... as sent
  std::string target;  // request target as sent, e.g. "/v1/models?x=1"
  std::string path;    // target without the query string
  std::string query;   // after '?', empty when absent
  std::vector<HeaderField> headers;
  std::string body;
  std::string request_id;  // X-Request-Id from the client, or one the server made up
  std::string peer;        // "address:port" of the client

  // The first header called `name` (case-insensitive), or an empty view.
  std::string_view Header(std::string_view name) const;
};

// A complete (non-streaming) response.
struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<HeaderField> headers;  // extra headers; Content-Length/Connection are the server's
  std::string body;

  static Response Json(int status, std::string body) {
    Response r;
    r.status = status;
    r.body = std::move(body);
    return r;
  }
  static Response Text(int status, std::string body,
                       std::string content_type = "text/plain; charset=utf-8") {
    Response r;
    r.status = status;
    r.content_type = std::move(content_type);
    r.body = std::move(body);
    return r;
  }
};

// Reason phrase for a status code ("Not Found"); "Unknown" for codes it does not know.
std::string_view ReasonPhrase(int status);

// Case-insensitive ASCII comparison of header names and tokens.
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

}  // namespace deltaserve::router::http
