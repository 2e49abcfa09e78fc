// Calls to the query HTTP API (api/v1/...), and its failures put in words a user can act on.

const API = 'api/v1/'; // relative, so the page also works when mounted under a path prefix

// How the API's parameter names read in an error message.
const PARAM_WORDS = {
  topology: 'the topology', set: 'the aggregate set', entity: 'the entity list', from: 'the start of the time range',
  to: 'the end of the time range', limit: 'the window limit', order: 'the order', live: 'the live option',
};

export class APIError extends Error {
  constructor(status, message, parameter) {
    super(message);
    this.status = status;
    this.parameter = parameter || '';
  }
}

// api returns the answer's JSON. An aborted request rethrows the AbortError, so callers can tell a
// request they replaced from a failure; every other failure is an APIError (status 0: no answer).
export async function api(endpoint, params, signal) {
  const url = API + endpoint + (params ? '?' + new URLSearchParams(params).toString() : '');
  let resp;
  try {
    resp = await fetch(url, { signal, headers: { Accept: 'application/json' } });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new APIError(0, e.message || String(e));
  }
  let body = null;
  try {
    body = await resp.json();
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new APIError(resp.status, resp.ok ? 'the answer was not JSON' : resp.statusText);
  }
  if (!resp.ok) throw new APIError(resp.status, (body && body.error) || resp.statusText, body && body.parameter);
  return body;
}

// describe turns an API failure into a sentence a user can act on.
export function describe(err) {
  if (!(err instanceof APIError)) return String(err && err.message ? err.message : err);
  if (err.status === 0) return 'The abacus server did not answer (' + err.message + '). Is it still running?';
  if (err.status === 400) {
    let msg = err.message;
    if (err.parameter) {
      msg = msg.replace(new RegExp('^parameter ' + err.parameter + ':\\s*'), '');
      return 'The server did not accept ' + (PARAM_WORDS[err.parameter] || err.parameter) + ': ' + msg + '.';
    }
    return 'The server did not accept the request: ' + msg + '.';
  }
  if (err.status === 503) return 'The aggregate store is not answering: ' + err.message + '.';
  return 'The server answered ' + err.status + ': ' + err.message + '.';
}
