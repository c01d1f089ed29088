// payonce console: keeps the overview and the operation lists current without a page load. Every
// `data-refresh-ms` on <main>, it fetches the same URL and swaps each `data-live` region (by id) for
// its fresh copy. It pauses while the tab is hidden, stops when the session has ended (401/403) and
// says so with a sign-in link, and never replaces a region the person is working in (a focused
// control, a box ticked, text typed). Served from the console's own origin, so the CSP allows it
// with `script-src 'self'`; without it the page's Refresh link reloads the page.
'use strict';
(() => {
  const main = document.querySelector('main[data-refresh-ms]');
  if (!main) return;
  const every = Number(main.getAttribute('data-refresh-ms'));
  if (!Number.isFinite(every) || every <= 0) return;
  const status = document.getElementById('refresh-status');
  let timer = null;
  let stopped = false;
  let inFlight = false;
  let last = Date.now();

  const note = (text) => {
    if (status) status.textContent = text;
  };
  const clock = () => new Date().toISOString().slice(11, 19) + ' UTC';

  // Whether the person is working in `region`: focus inside it, or a control changed from what the
  // page served.
  const busy = (region) => {
    const active = document.activeElement;
    if (active && active !== document.body && region.contains(active)) return true;
    for (const el of region.querySelectorAll('input, select, textarea')) {
      if (el.type === 'checkbox' || el.type === 'radio') {
        if (el.checked !== el.defaultChecked) return true;
      } else if (el.tagName === 'SELECT') {
        for (const option of el.options) if (option.selected !== option.defaultSelected) return true;
      } else if (el.type !== 'hidden' && el.value !== el.defaultValue) {
        return true;
      }
    }
    return false;
  };

  const ended = () => {
    stopped = true;
    clearTimeout(timer);
    if (document.getElementById('session-ended')) return;
    const notice = document.createElement('section');
    notice.id = 'session-ended';
    notice.className = 'error';
    notice.setAttribute('role', 'alert');
    const text = document.createElement('p');
    const link = document.createElement('a');
    link.href = '/console/sign-in';
    link.id = 'sign-in-again';
    link.textContent = 'Sign in again';
    text.append('Your console session has ended, so this page stopped updating. ', link, ' to see current figures.');
    notice.append(text);
    main.prepend(notice);
    note('Not updating: the session has ended.');
  };

  const schedule = (wait) => {
    clearTimeout(timer);
    timer = null;
    if (!stopped && !document.hidden) timer = setTimeout(refresh, wait);
  };

  async function refresh() {
    if (stopped || inFlight || document.hidden) return;
    inFlight = true;
    last = Date.now();
    try {
      const response = await fetch(window.location.href, {
        credentials: 'same-origin',
        cache: 'no-store',
        headers: { accept: 'text/html' },
      });
      if (response.status === 401 || response.status === 403) {
        ended();
        return;
      }
      if (!response.ok) {
        note(`Could not update at ${clock()} (HTTP ${response.status}); trying again.`);
        return;
      }
      const fresh = new DOMParser().parseFromString(await response.text(), 'text/html');
      let kept = 0;
      for (const region of document.querySelectorAll('main [data-live][id]')) {
        const next = fresh.getElementById(region.id);
        if (!next) continue;
        if (busy(region)) {
          kept += 1;
          continue;
        }
        region.replaceWith(document.adoptNode(next));
      }
      note(kept > 0 ? `Updated at ${clock()}, except what you are working on.` : `Updated at ${clock()}.`);
    } catch (error) {
      note(`Could not update at ${clock()} (${error.message}); trying again.`);
    } finally {
      inFlight = false;
      schedule(every);
    }
  }

  document.addEventListener('visibilitychange', () => {
    if (stopped) return;
    if (document.hidden) {
      schedule(every);
      return;
    }
    const since = Date.now() - last;
    if (since >= every) refresh();
    else schedule(every - since);
  });
  note(`Updates itself every ${Math.round(every / 1000)} seconds while this tab is visible.`);
  schedule(every);
})();
