// countersign: security keys and security-key approvals (WebAuthn).
//
// Forms marked data-webauthn-register, data-webauthn-remove or
// data-webauthn-approve carry their endpoints in data-begin and data-finish.
// The server sends ceremony options as JSON ({"publicKey": …}); the browser's
// own parseCreationOptionsFromJSON / parseRequestOptionsFromJSON turn them
// into options, and credential.toJSON() goes back as it is. The server
// decides everything; this script only carries messages between the server
// and the authenticator and says what went wrong, in the form's role="alert"
// region. No inline scripts: the Content-Security-Policy forbids them.
(function () {
  "use strict";

  // The CSRF token: the session's, or on the sign-in page the form's own.
  var token = "";
  function csrfToken() {
    if (token) return token;
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.getAttribute("content") : "";
  }

  function supported() {
    return !!(window.PublicKeyCredential && navigator.credentials &&
      typeof PublicKeyCredential.parseCreationOptionsFromJSON === "function" &&
      typeof PublicKeyCredential.parseRequestOptionsFromJSON === "function");
  }

  // The live regions of a form: its own, or the page's.
  function region(form, name) {
    return form.querySelector("[data-webauthn-" + name + "]") ||
      document.querySelector("[data-webauthn-" + name + "]");
  }

  function say(form, status, error) {
    var s = region(form, "status"), e = region(form, "error");
    if (s) s.textContent = status || "";
    if (e) e.textContent = error || "";
  }

  // ServerError is a refusal the server worded for the reviewer.
  function ServerError(message, code) {
    this.name = "ServerError";
    this.message = message;
    this.code = code;
  }

  function postJSON(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "X-CSRF-Token": csrfToken()
      },
      body: JSON.stringify(body || {})
    }).then(function (res) {
      return res.json().catch(function () { return null; }).then(function (data) {
        if (!res.ok) {
          var err = data && data.error;
          throw new ServerError((err && err.message) || ("The server answered " + res.status + "."), err && err.code);
        }
        return data;
      });
    });
  }

  // What a browser-side failure means for a person. NotAllowedError is
  // what browsers say for a cancelled or timed-out request and for a key
  // that could not verify its user: they do not tell which.
  function message(err, nothing) {
    if (err instanceof ServerError) return err.message;
    switch (err && err.name) {
      case "NotAllowedError":
        return "Your security key did not verify you (user verification is required), or the request was cancelled or timed out. " +
          nothing + " Try again, and unlock the key with its PIN, fingerprint or face when asked.";
      case "InvalidStateError":
        return "This security key is registered already. " + nothing;
      case "SecurityError":
        return "The browser refused to use a security key at this address: WebAuthn needs https (or http://localhost) " +
          "and an address that matches the server's relying party id. " + nothing;
      case "NotSupportedError":
        return "Your security key or browser does not support what this console asks for (a key with user verification). " + nothing;
      case "AbortError":
        return "The security-key request was interrupted. " + nothing;
      case "TypeError":
        return "The server could not be reached, or its answer was not understood. " + nothing;
    }
    return "The security-key request failed" + (err && err.message ? " (" + err.message + ")" : "") + ". " + nothing;
  }

  function release(form) {
    delete form.dataset.busy;
    form.removeAttribute("data-submitted");
    form.querySelectorAll('button[aria-disabled="true"]').forEach(function (b) {
      b.removeAttribute("aria-disabled");
    });
  }

  function register(form) {
    var nameField = form.querySelector('input[name="name"]');
    var name = nameField ? nameField.value : "";
    var begin = form.dataset.begin;
    say(form, "Preparing the registration…");
    return postJSON(begin).then(function (opts) {
      // A reviewer who has a key proves possession of it first.
      if (!opts || !opts.confirm) return opts;
      say(form, "You have a key already: confirm with it first (unlock and touch it)…");
      return navigator.credentials.get({ publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(opts.confirm.publicKey) })
        .then(function (cred) {
          say(form, "Checking your key…");
          return postJSON(begin, { confirm: cred.toJSON() });
        });
    }).then(function (opts) {
      say(form, "Follow your browser: choose the new security key or passkey, unlock it and touch it…");
      return navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(opts.publicKey) });
    }).then(function (cred) {
      say(form, "Checking the new key…");
      var body = cred.toJSON();
      body.name = name;
      return postJSON(form.dataset.finish, body);
    });
  }

  function assert(form, beginBody, prompt, extra) {
    say(form, "Preparing the security-key request…");
    return postJSON(form.dataset.begin, beginBody).then(function (opts) {
      say(form, prompt);
      return navigator.credentials.get({ publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(opts.publicKey) });
    }).then(function (cred) {
      say(form, "Checking the signature…");
      var body = cred.toJSON();
      if (extra) Object.keys(extra).forEach(function (k) { body[k] = extra[k]; });
      return postJSON(form.dataset.finish, body);
    });
  }

  var kinds = [
    {
      attr: "data-webauthn-register", nothing: "No key was registered.",
      run: register
    },
    {
      attr: "data-webauthn-remove", nothing: "No key was removed.",
      run: function (form) {
        return assert(form, {}, "Confirm the removal: unlock and touch one of your security keys…");
      }
    },
    {
      attr: "data-webauthn-login", nothing: "Nobody was signed in.",
      run: function (form) {
        var org = document.querySelector('input[name="org"]');
        var next = form.querySelector('input[name="next"]');
        var body = { org: org ? org.value.trim() : "" };
        say(form, "Preparing the passkey sign-in…");
        return postJSON(form.dataset.begin, body).then(function (opts) {
          say(form, "Choose your passkey, unlock it and touch it…");
          return navigator.credentials.get({ publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(opts.publicKey) });
        }).then(function (cred) {
          say(form, "Checking the passkey…");
          var res = cred.toJSON();
          res.org = body.org;
          res.next = next ? next.value : "";
          var zone = form.querySelector("input[data-browser-zone]");
          res.zone = zone ? zone.value : "";
          return postJSON(form.dataset.finish, res);
        });
      }
    },
    {
      attr: "data-webauthn-approve", nothing: "Nothing was approved.",
      run: function (form) {
        var digest = form.querySelector('input[name="digest"]');
        var comment = form.querySelector('textarea[name="comment"]');
        var effect = form.querySelector('input[name="effect"]');
        return assert(form, { digest: digest ? digest.value : "" },
          form.dataset.prompt || "Unlock and touch your security key to approve exactly this proposal…",
          { comment: comment ? comment.value : "", effect: effect ? effect.value : "" });
      }
    }
  ];

  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.hasAttribute) return;
    var kind = null;
    kinds.forEach(function (k) { if (form.hasAttribute(k.attr)) kind = k; });
    if (!kind) return;
    ev.preventDefault();
    if (form.dataset.busy) return;
    if (!supported()) {
      say(form, "", "This browser cannot use security keys here (it lacks WebAuthn's JSON support). " +
        "Use a current version of Chrome, Edge, Firefox or Safari. " + kind.nothing);
      release(form);
      return;
    }
    form.dataset.busy = "1";
    var own = form.querySelector('input[name="csrf_token"]');
    token = own ? own.value : "";
    kind.run(form).then(function (res) {
      say(form, "Done.");
      window.location.assign((res && res.redirect) || window.location.href);
    }, function (err) {
      say(form, "", message(err, kind.nothing));
      release(form);
      var e = region(form, "error");
      if (e && e.scrollIntoView) e.scrollIntoView({ block: "nearest" });
    });
  });
})();
