// Runs before the page's body: a browser with a stored ACL token shows the page only once
// ui.js has read it again with the token (the first, anonymous render would flash).
try {
  if (localStorage.getItem("drover.token")) document.documentElement.classList.add("has-token");
} catch (e) {
  // Storage disabled: no token can be stored either.
}
