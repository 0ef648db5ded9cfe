"use strict";
// Swagger UI over rivet's schema, for a person in a browser, whatever the host authenticates
// with. The schema needs a signed-in caller, and a browser holds a credential only with session
// authentication. Without one, the page shows a stand-in until the person authorizes: no
// operations, only the host's security schemes, so the Authorize button is there. Authorizing
// loads the schema again with that credential; persistAuthorization keeps it for the next visit.

const swaggerSettings = {{ settings|safe }};
const securitySchemes = {{ security_schemes|safe }};
const schemaUrl = new URL("{{ schema_url|escapejs }}", document.baseURI).href;
const standIn = {
  openapi: "3.0.3",
  info: {
    title: "{{ title|escapejs }}",
    version: "{{ version|escapejs }}",
    description:
      "The schema of this API needs a signed-in caller. Use **Authorize** with your " +
      "credentials: the operations then load, and the page keeps the credentials for the " +
      "next visit until you log out there.",
  },
  paths: {},
  components: {securitySchemes},
};
let ui;

// What the person authorized: Swagger UI's state, or before it restores that state on a new
// visit, what persistAuthorization stored.
const authorized = () => {
  if (ui !== undefined) {
    const state = ui.getState().getIn(["auth", "authorized"]);
    if (state && state.size > 0) {
      return state.toJS();
    }
  }
  try {
    return JSON.parse(localStorage.getItem("authorized") || "{}") || {};
  } catch (error) {
    return {};
  }
};

// The header of the first authorized scheme the schema endpoint reads (the host's own).
const credentialHeaders = () => {
  const given = authorized();
  for (const name of Object.keys(securitySchemes)) {
    const auth = given[name];
    const scheme = securitySchemes[name];
    if (auth === undefined || auth.value === undefined) {
      continue;
    }
    if (scheme.type === "http" && scheme.scheme === "basic") {
      try {
        return {Authorization: "Basic " + btoa(auth.value.username + ":" + auth.value.password)};
      } catch (error) {
        continue; // btoa takes Latin-1 only; that scheme cannot carry these characters
      }
    }
    if (scheme.type === "http" && scheme.scheme === "bearer") {
      return {Authorization: "Bearer " + auth.value};
    }
    if (scheme.type === "apiKey" && scheme.in === "header") {
      return {[scheme.name]: auth.value};
    }
  }
  return {};
};

const requestInterceptor = (request) => {
  if (request.loadSpec) {
    Object.assign(request.headers, credentialHeaders());
  } else if (!["GET", undefined].includes(request.method) && request.credentials === "same-origin") {
    request.headers["{{ csrf_header_name }}"] = "{{ csrf_token }}";
  }
  return request;
};

const responseInterceptor = (response) => {
  if (response.url === schemaUrl && [401, 403].includes(response.status)) {
    const text = JSON.stringify(standIn);
    return {...response, ok: true, status: 200, statusText: "OK", text, data: text, body: standIn};
  }
  return response;
};

// Authorize and Logout load the schema again, with the new credentials or none.
const reloadOnAuthorize = () => {
  const reload = (action) => (...args) => {
    const result = action(...args);
    setTimeout(() => ui.specActions.download());
    return result;
  };
  return {statePlugins: {auth: {wrapActions: {authorize: reload, logout: reload}}}};
};

ui = SwaggerUIBundle({
  url: schemaUrl,
  dom_id: "#swagger-ui",
  presets: [SwaggerUIBundle.presets.apis],
  plugins: [reloadOnAuthorize],
  layout: "BaseLayout",
  requestInterceptor,
  responseInterceptor,
  ...swaggerSettings,
});
