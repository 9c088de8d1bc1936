"use strict";
// rocketq console: hash routes (#/page?args) rendered into <main> from the JSON API.
(function () {
  const main = document.getElementById("main");
  const dialog = document.getElementById("dialog");

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "text") el.textContent = v;
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  const enc = encodeURIComponent;
  function fmtTime(ms) { return ms > 0 ? new Date(ms).toLocaleString() : "-"; }
  function link(route, text) { return h("a", { href: "#/" + route }, text); }

  async function api(method, path, body) {
    const res = await fetch(path, {
      method, headers: body ? { "Content-Type": "application/json" } : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    const doc = await res.json().catch(() => ({ error: "bad answer (" + res.status + ")" }));
    if (!res.ok) throw new Error(doc.error || ("HTTP " + res.status));
    return doc;
  }
  const get = (path) => api("GET", path);

  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, "");
    const [path, qs] = raw.split("?");
    const parts = path.split("/").map(decodeURIComponent);
    return { page: parts[0] || "cluster", arg: parts.slice(1).join("/"), q: new URLSearchParams(qs || "") };
  }
  function go(route) { location.hash = "#/" + route; }

  function table(caption, cols, rows, cell) {
    return h("table", {},
      h("caption", {}, caption),
      h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col", class: c.num ? "num" : null }, c.label)))),
      h("tbody", {}, rows.length ? rows.map((r) => h("tr", {}, cols.map((c) => h("td", { class: c.num ? "num" : null }, cell(r, c.key))))) :
        h("tr", {}, h("td", { colspan: cols.length, class: "muted" }, "none"))));
  }

  function pager(doc, onPage, what) {
    return h("nav", { class: "pager", "aria-label": what + " pages" },
      h("button", { type: "button", disabled: doc.page <= 1, onclick: () => onPage(doc.page - 1) }, "Previous"),
      h("span", {}, `Page ${doc.page} of ${doc.pages} (${doc.total} ${what})`),
      h("button", { type: "button", disabled: doc.page >= doc.pages, onclick: () => onPage(doc.page + 1) }, "Next"));
  }

  // A modal dialog; resolves with the form's values on OK, null on Cancel/Escape.
  function ask(title, fields, okText, danger) {
    return new Promise((resolve) => {
      document.getElementById("dialog-title").textContent = title;
      const body = document.getElementById("dialog-body");
      body.replaceChildren(...fields);
      const ok = document.getElementById("dialog-ok");
      ok.textContent = okText || "OK";
      ok.className = danger ? "danger" : "primary";
      const cancel = document.getElementById("dialog-cancel");
      const opener = document.activeElement;
      function done(value) {
        ok.onclick = cancel.onclick = dialog.onclose = null;
        if (dialog.open) dialog.close();
        if (opener && opener.focus) opener.focus();
        resolve(value);
      }
      ok.onclick = (e) => {
        e.preventDefault();
        const form = document.getElementById("dialog-form");
        if (!form.reportValidity()) return;
        done(Object.fromEntries(new FormData(form).entries()));
      };
      cancel.onclick = () => done(null);
      dialog.onclose = () => done(null);
      dialog.showModal();
      const first = body.querySelector("input, select") || cancel;
      first.focus();
    });
  }
  function field(label, name, value, extra) {
    return h("label", {}, label, h("input", Object.assign({ name, value: value ?? "" }, extra || {})));
  }

  function status(el, text, isError) {
    el.replaceChildren(h("p", { class: isError ? "error" : "status", role: isError ? "alert" : "status" }, text));
  }

  // -- pages ---------------------------------------------------------------------------------
  const pages = {};

  pages.cluster = async function () {
    const doc = await get("/api/cluster");
    const cols = [
      { key: "cluster", label: "Cluster" }, { key: "brokerName", label: "Broker" }, { key: "brokerId", label: "Id", num: 1 },
      { key: "addr", label: "Address" }, { key: "role", label: "Role" }, { key: "version", label: "Version" },
      { key: "diskRatio", label: "Disk use" }, { key: "putTps", label: "Put TPS" }, { key: "getTps", label: "Get TPS" },
      { key: "msgPutTotalToday", label: "Put today", num: 1 }, { key: "runtime", label: "Up" },
    ];
    return [h("h1", { tabindex: -1 }, "Cluster"),
      h("p", {}, "Name servers: ", doc.namesrv.join(", ")),
      table(`${doc.brokers.length} broker(s)`, cols, doc.brokers, (r, k) => {
        if (k === "diskRatio") return r.diskRatio == null ? "-" : (parseFloat(r.diskRatio) * 100).toFixed(1) + " %";
        if (k === "version" && r.error) return h("span", { class: "error" }, r.error);
        return r[k];
      })];
  };

  pages.topics = async function (route) {
    const q = route.q.get("q") || "", kind = route.q.get("kind") || "normal", page = route.q.get("page") || "1";
    const doc = await get(`/api/topics?q=${enc(q)}&kind=${enc(kind)}&page=${enc(page)}`);
    const nav = (p, qq, kk) => go(`topics?q=${enc(qq ?? q)}&kind=${enc(kk ?? kind)}&page=${p}`);
    const search = h("input", { id: "topic-search", type: "search", name: "q", value: q });
    const kindSel = h("select", { id: "topic-kind", name: "kind" },
      ["normal", "retry", "dlq", "system", "all"].map((k) => h("option", { value: k, selected: k === kind }, k)));
    const msg = h("div", {});
    return [h("h1", { tabindex: -1 }, "Topics"),
      h("form", { class: "inline", role: "search", onsubmit: (e) => { e.preventDefault(); nav(1, search.value, kindSel.value); } },
        h("label", {}, "Search topics", search), h("label", {}, "Kind", kindSel),
        h("button", { type: "submit" }, "Search"),
        h("button", { type: "button", id: "create-topic", class: "primary", onclick: () => editTopic(null, msg) }, "Create topic")),
      msg,
      table(`${doc.total} topic(s)`, [{ key: "topic", label: "Topic" }, { key: "kind", label: "Kind" }], doc.items,
        (r, k) => k === "topic" ? link("topic/" + enc(r.topic), r.topic) : r[k]),
      pager(doc, (p) => nav(p), "topics")];
  };

  async function editTopic(current, msg) {
    const fields = [];
    if (!current) fields.push(field("Topic name", "topic", "", { required: true, pattern: "[%|a-zA-Z0-9_-]+", id: "new-topic-name" }));
    fields.push(field("Read queues", "readQueueNums", current ? current.read : 8, { type: "number", min: 1, max: 1024, required: true }));
    fields.push(field("Write queues", "writeQueueNums", current ? current.write : 8, { type: "number", min: 1, max: 1024, required: true }));
    fields.push(h("label", {}, "Permission", h("select", { name: "perm" },
      [[6, "read and write"], [4, "write only"], [2, "read only"]].map(([v, t]) => h("option", { value: v, selected: current && current.perm === v }, t)))));
    const values = await ask(current ? `Update topic ${current.topic}` : "Create topic", fields, current ? "Update" : "Create");
    if (!values) return;
    const topic = current ? current.topic : values.topic;
    try {
      await api("POST", "/api/topics", { topic, readQueueNums: +values.readQueueNums, writeQueueNums: +values.writeQueueNums, perm: +values.perm });
      flash = `Topic ${topic} ${current ? "updated" : "created"}.`;
      if (current) render(); else go("topic/" + enc(topic));
    } catch (e) { status(msg, e.message, true); }
  }

  function chart(points, intervalS) {
    const W = 600, H = 140, P = 30;
    const svg = (tag, attrs, ...c) => { const el = document.createElementNS("http://www.w3.org/2000/svg", tag); for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v); el.append(...c); return el; };
    const max = Math.max(1, ...points.map((p) => p.tps));
    const t1 = Date.now(), t0 = t1 - 3600e3;
    const xs = (t) => P + (W - 2 * P) * Math.max(0, t - t0) / 3600e3;
    const ys = (v) => H - P + -(H - 2 * P) * v / max;
    const label = points.length ? `Messages per second over the last hour, up to ${max.toFixed(1)}; latest ${points[points.length - 1].tps.toFixed(1)}`
      : `No samples yet (one every ${intervalS} s)`;
    return svg("svg", { class: "chart", role: "img", "aria-label": label, width: W, height: H, viewBox: `0 0 ${W} ${H}` },
      svg("title", {}, label),
      svg("line", { x1: P, y1: H - P, x2: W - P, y2: H - P, stroke: "#767f8a" }),
      svg("text", { x: 2, y: P }, max.toFixed(1)), svg("text", { x: 2, y: H - P }, "0"),
      svg("text", { x: P, y: H - 8 }, "-60 min"), svg("text", { x: W - P - 20, y: H - 8 }, "now"),
      svg("polyline", { points: points.map((p) => `${xs(p.t).toFixed(1)},${ys(p.tps).toFixed(1)}`).join(" ") }));
  }

  pages.topic = async function (route) {
    const topic = route.arg, page = route.q.get("page") || "1";
    const [info, queues, tps] = await Promise.all([
      get(`/api/topics/${enc(topic)}`), get(`/api/topics/${enc(topic)}/queues?page=${enc(page)}`), get(`/api/topics/${enc(topic)}/tps`)]);
    const msg = h("div", {});
    const qd = info.queueData[0] || { readQueueNums: 0, writeQueueNums: 0, perm: 6 };
    const del = async () => {
      const ok = await ask(`Delete topic ${topic}?`, [h("p", {}, `This deletes ${topic} and its route on every broker of its cluster. Its messages can no longer be consumed.`)], "Delete", true);
      if (!ok) return;
      try { await api("DELETE", `/api/topics/${enc(topic)}`); go("topics"); } catch (e) { status(msg, e.message, true); }
    };
    return [h("h1", { tabindex: -1 }, "Topic ", topic),
      h("p", {}, link("topics", "All topics")),
      h("div", { class: "toolbar" },
        h("button", { type: "button", id: "update-topic", onclick: () => editTopic({ topic, read: qd.readQueueNums, write: qd.writeQueueNums, perm: qd.perm }, msg) }, "Update"),
        h("button", { type: "button", id: "delete-topic", class: "danger", onclick: del }, "Delete"),
        link(`messages?mode=time&topic=${enc(topic)}`, "Browse messages")),
      msg,
      h("div", { class: "cards" },
        h("div", { class: "card" }, h("div", {}, "Messages stored"), h("div", { class: "v", id: "total-messages" }, queues.totalMessages)),
        h("div", { class: "card" }, h("div", {}, "Queues"), h("div", { class: "v" }, queues.total))),
      h("h2", {}, "Throughput"), chart(tps.points, tps.intervalS),
      table("Route", [{ key: "brokerName", label: "Broker" }, { key: "readQueueNums", label: "Read queues", num: 1 }, { key: "writeQueueNums", label: "Write queues", num: 1 }, { key: "perm", label: "Perm", num: 1 }],
        info.queueData, (r, k) => r[k]),
      h("h2", {}, "Queues"),
      table("Queue offsets", [{ key: "brokerName", label: "Broker" }, { key: "queueId", label: "Queue", num: 1 }, { key: "minOffset", label: "Min offset", num: 1 },
        { key: "maxOffset", label: "Max offset", num: 1 }, { key: "lastUpdateTimestamp", label: "Last update" }], queues.items,
        (r, k) => k === "lastUpdateTimestamp" ? fmtTime(r[k]) : r[k]),
      pager(queues, (p) => go(`topic/${enc(topic)}?page=${p}`), "queues")];
  };

  pages.groups = async function (route) {
    const q = route.q.get("q") || "", page = route.q.get("page") || "1";
    const doc = await get(`/api/groups?q=${enc(q)}&page=${enc(page)}`);
    const search = h("input", { id: "group-search", type: "search", name: "q", value: q });
    return [h("h1", { tabindex: -1 }, "Consumer groups"),
      h("form", { class: "inline", role: "search", onsubmit: (e) => { e.preventDefault(); go(`groups?q=${enc(search.value)}`); } },
        h("label", {}, "Search groups", search), h("button", { type: "submit" }, "Search")),
      table(`${doc.total} group(s)`, [{ key: "group", label: "Group" }, { key: "orderly", label: "Orderly" }, { key: "broadcast", label: "Broadcast" }, { key: "retryMaxTimes", label: "Max retries", num: 1 }],
        doc.items, (r, k) => k === "group" ? link("group/" + enc(r.group), r.group) : (typeof r[k] === "boolean" ? (r[k] ? "yes" : "no") : r[k])),
      pager(doc, (p) => go(`groups?q=${enc(q)}&page=${p}`), "groups")];
  };

  pages.group = async function (route) {
    const group = route.arg, page = route.q.get("page") || "1";
    const [info, prog] = await Promise.all([get(`/api/groups/${enc(group)}`), get(`/api/groups/${enc(group)}/progress?page=${enc(page)}`)]);
    const msg = h("div", {});
    const topics = Array.from(new Set([...(prog.topics || []), ...Object.keys(info.subscriptions)])).filter((t) => !t.startsWith("%RETRY%"));
    const topicSel = h("select", { id: "reset-topic", name: "topic" }, topics.map((t) => h("option", { value: t }, t)));
    const pad = (n) => String(n).padStart(2, "0");
    const now = new Date(Date.now() - 3600e3);
    const timeIn = h("input", { id: "reset-time", type: "datetime-local", step: 1, name: "time",
      value: `${now.getFullYear()}-${pad(now.getMonth() + 1)}-${pad(now.getDate())}T${pad(now.getHours())}:${pad(now.getMinutes())}:${pad(now.getSeconds())}` });
    const reset = async (e) => {
      e.preventDefault();
      const when = new Date(timeIn.value).getTime();
      if (!topicSel.value || !Number.isFinite(when)) { status(msg, "Choose a topic and a time.", true); return; }
      const ok = await ask(`Reset ${group} on ${topicSel.value}?`, [h("p", {}, `Every queue of ${topicSel.value} moves to the first message stored at or after ${new Date(when).toLocaleString()}. Online consumers jump there.`)], "Reset", true);
      if (!ok) return;
      try {
        const doc = await api("POST", `/api/groups/${enc(group)}/reset`, { topic: topicSel.value, timestamp: when });
        flash = `Reset ${doc.offsets.length} queue(s) of ${doc.topic}.`;
        render();
      } catch (err) { status(msg, err.message, true); }
    };
    return [h("h1", { tabindex: -1 }, "Consumer group ", group),
      h("p", {}, link("groups", "All groups")),
      msg,
      h("div", { class: "cards" },
        h("div", { class: "card" }, h("div", {}, "Total lag"), h("div", { class: "v", id: "total-lag" }, prog.totalLag)),
        h("div", { class: "card" }, h("div", {}, "Consume TPS"), h("div", { class: "v" }, (prog.consumeTps || 0).toFixed(1))),
        h("div", { class: "card" }, h("div", {}, "Members"), h("div", { class: "v" }, info.members.length))),
      h("h2", {}, "Members"),
      table(info.online ? "Online members" : "No member online", [{ key: "clientId", label: "Client id" }, { key: "clientAddr", label: "Address" }, { key: "language", label: "Language" }, { key: "versionDesc", label: "Client version" }],
        info.members, (r, k) => r[k]),
      h("h2", {}, "Progress"),
      prog.note ? h("p", { class: "muted" }, prog.note) : null,
      table("Per-queue lag", [{ key: "topic", label: "Topic" }, { key: "brokerName", label: "Broker" }, { key: "queueId", label: "Queue", num: 1 },
        { key: "brokerOffset", label: "Broker offset", num: 1 }, { key: "consumerOffset", label: "Consumer offset", num: 1 }, { key: "lag", label: "Lag", num: 1 }, { key: "lastTimestamp", label: "Last consumed" }],
        prog.items, (r, k) => k === "lastTimestamp" ? fmtTime(r[k]) : r[k]),
      pager(prog, (p) => go(`group/${enc(group)}?page=${p}`), "queues"),
      h("h2", {}, "Reset offset by time"),
      h("form", { class: "inline", onsubmit: reset }, h("label", {}, "Topic", topicSel), h("label", {}, "Time", timeIn),
        h("button", { type: "submit", id: "reset-button", class: "danger" }, "Reset offset"))];
  };

  function hex(bytes) {
    const lines = [];
    for (let i = 0; i < bytes.length && i < 4096; i += 16) {
      const row = Array.from(bytes.slice(i, i + 16));
      lines.push(i.toString(16).padStart(6, "0") + "  " + row.map((b) => b.toString(16).padStart(2, "0")).join(" ").padEnd(48) + "  " + row.map((b) => b >= 32 && b < 127 ? String.fromCharCode(b) : ".").join(""));
    }
    return lines.join("\n");
  }

  function messageDetails(m, holder) {
    const bytes = Uint8Array.from(atob(m.bodyBase64), (c) => c.charCodeAt(0));
    const pre = h("pre", { class: "body", id: "body-preview", tabindex: 0, "aria-label": "Message body" });
    const views = {
      Text: () => m.body,
      JSON: () => { try { return JSON.stringify(JSON.parse(m.body), null, 2); } catch (e) { return "Not JSON: " + e.message; } },
      Hex: () => hex(bytes),
    };
    const buttons = Object.keys(views).map((name) => h("button", { type: "button", "aria-pressed": name === "Text" ? "true" : "false", onclick: (e) => {
      for (const b of buttons) b.setAttribute("aria-pressed", b === e.currentTarget ? "true" : "false");
      pre.textContent = views[name]();
    } }, name));
    pre.textContent = views.Text();
    const msg = h("div", {});
    const resend = async () => {
      const values = await ask("Resend message", [
        field("Consumer group (asked to consume it directly when its brokers relay that)", "group", m.topic.startsWith("%DLQ%") ? m.topic.slice(5) : ""),
        field("Topic to send it to (default: its original topic)", "topic", m.properties.RETRY_TOPIC || (m.topic.startsWith("%") ? "" : m.topic)),
      ], "Resend");
      if (!values) return;
      try {
        const doc = await api("POST", "/api/messages/resend", { msgId: m.msgId, group: values.group, topic: values.topic });
        status(msg, doc.how === "send" ? `Sent again to ${doc.topic} as ${doc.msgId}.` : `Consumed by ${doc.clientId}: ${doc.result}`);
      } catch (e) { status(msg, e.message, true); }
    };
    const props = Object.entries(m.properties).map(([k, v]) => ({ k, v }));
    holder.replaceChildren(...[
      h("h2", { tabindex: -1, id: "details-title" }, "Message ", m.msgId),
      h("div", { class: "toolbar" }, link(`trace?id=${enc(m.uniqKey || m.msgId)}`, "Trace"),
        h("button", { type: "button", id: "resend-button", onclick: resend }, "Resend")),
      msg,
      m.undecodable ? h("p", { class: "error" }, m.undecodable) : null,
      h("div", { role: "group", "aria-label": "Body view", class: "toolbar" }, buttons),
      pre,
      table("Properties", [{ key: "k", label: "Name" }, { key: "v", label: "Value" }], props, (r, k) => r[k])].filter((c) => c));
    holder.querySelector("#details-title").focus();
  }

  function messageTable(messages, details) {
    const cols = [{ key: "msgId", label: "Message id" }, { key: "topic", label: "Topic" }, { key: "queueId", label: "Queue", num: 1 }, { key: "queueOffset", label: "Offset", num: 1 },
      { key: "keys", label: "Keys" }, { key: "tags", label: "Tags" }, { key: "storeTimestamp", label: "Stored" }, { key: "bodySize", label: "Body bytes", num: 1 }];
    return table(`${messages.length} message(s)`, cols, messages, (m, k) => {
      if (k === "msgId") return h("button", { type: "button", class: "linklike", onclick: () => messageDetails(m, details) }, m.msgId);
      if (k === "keys") return (m.keys || []).join(" ");
      if (k === "storeTimestamp") return fmtTime(m[k]);
      return m[k];
    });
  }

  pages.messages = async function (route) {
    const q = route.q, mode = q.get("mode") || "key";
    const results = h("div", { id: "results" }), details = h("div", { id: "details" });
    const inputs = {
      key: [["topic", "Topic"], ["key", "Key"]],
      id: [["id", "Message id"], ["topic", "Topic (to look up a client message id)"]],
      time: [["topic", "Topic"], ["begin", "From", "datetime-local"], ["end", "To", "datetime-local"]],
      offset: [["topic", "Topic"], ["broker", "Broker"], ["queue", "Queue", "number"], ["offset", "Offset", "number"], ["count", "Count", "number"]],
    };
    const modeSel = h("select", { id: "search-mode", name: "mode", onchange: () => go(`messages?mode=${modeSel.value}`) },
      [["key", "by key"], ["id", "by message id"], ["time", "by topic and time"], ["offset", "by queue offset"]].map(([v, t]) => h("option", { value: v, selected: v === mode }, t)));
    const fields = inputs[mode].map(([name, label, type]) => h("label", {}, label, h("input", { id: "search-" + name, name, type: type || "text", step: type === "datetime-local" ? 1 : null, value: q.get(name) || "" })));
    const form = h("form", { class: "inline", role: "search", onsubmit: (e) => {
      e.preventDefault();
      const params = new URLSearchParams({ mode });
      for (const [name] of inputs[mode]) params.set(name, form.elements[name].value);
      const target = "messages?" + params.toString();
      if (location.hash === "#/" + target) render(); else go(target);
    } }, h("label", {}, "Search", modeSel), fields, h("button", { type: "submit", class: "primary", id: "search-button" }, "Search"));
    const out = [h("h1", { tabindex: -1 }, "Messages"), form, results, details];
    const v = (n) => q.get(n) || "";
    let url = null;
    if (mode === "key" && v("topic") && v("key")) url = `/api/messages/by-key?topic=${enc(v("topic"))}&key=${enc(v("key"))}`;
    if (mode === "id" && v("id")) url = `/api/messages/by-id?id=${enc(v("id"))}&topic=${enc(v("topic"))}`;
    if (mode === "time" && v("topic")) {
      const b = v("begin") ? new Date(v("begin")).getTime() : 0, e = v("end") ? new Date(v("end")).getTime() : Date.now() + 60e3;
      url = `/api/messages/by-time?topic=${enc(v("topic"))}&begin=${b}&end=${e}`;
    }
    if (mode === "offset" && v("topic") && v("broker") && v("queue") && v("offset")) url = `/api/messages/by-offset?topic=${enc(v("topic"))}&broker=${enc(v("broker"))}&queue=${enc(v("queue"))}&offset=${enc(v("offset"))}&count=${enc(v("count") || "1")}`;
    if (url) {
      try {
        const doc = await get(url);
        results.replaceChildren(messageTable(doc.messages, details));
        if (doc.messages.length === 1) messageDetails(doc.messages[0], details);
      } catch (e) { status(results, e.message, true); }
    }
    return out;
  };

  pages.dlq = async function (route) {
    const doc = await get(`/api/dlq?page=${enc(route.q.get("page") || "1")}`);
    return [h("h1", { tabindex: -1 }, "Dead-letter queues"),
      h("p", { class: "muted" }, "Messages a group failed to consume after its retries. Open one to read it and resend it."),
      table(`${doc.total} dead-letter topic(s)`, [{ key: "topic", label: "Topic" }, { key: "group", label: "Group" }, { key: "messages", label: "Messages", num: 1 }],
        doc.items, (r, k) => k === "topic" ? link(`messages?mode=time&topic=${enc(r.topic)}`, r.topic) : (k === "group" ? link("group/" + enc(r.group), r.group) : r[k])),
      pager(doc, (p) => go(`dlq?page=${p}`), "topics")];
  };

  pages.trace = async function (route) {
    const id = route.q.get("id") || "";
    const input = h("input", { id: "trace-id", name: "id", value: id, required: true, size: 40 });
    const out = [h("h1", { tabindex: -1 }, "Message trace"),
      h("form", { class: "inline", role: "search", onsubmit: (e) => { e.preventDefault(); go(`trace?id=${enc(input.value)}`); } },
        h("label", {}, "Message id", input), h("button", { type: "submit", class: "primary" }, "Show trace"))];
    if (id) {
      const doc = await get(`/api/trace?id=${enc(id)}`);
      out.push(doc.events.length ? h("ol", { class: "timeline", "aria-label": "Trace of " + id }, doc.events.map((e) =>
        h("li", { class: e.success ? "" : "failed" },
          h("strong", {}, e.event), ` (${e.type}) at ${fmtTime(e.timestamp)}`, h("br"),
          `group ${e.group || "-"}, client ${e.client_host || "-"}, ${e.status}` + (e.cost_ms ? `, ${e.cost_ms} ms` : "") + (e.attempt != null ? `, attempt ${e.attempt}` : "")))) :
        h("p", { class: "muted" }, "No trace recorded for this message (tracing is enabled per producer and consumer)."));
    }
    return out;
  };

  let generation = 0;
  let flash = null; // a message for the next page rendered (after a change)
  async function render() {
    const route = parseHash();
    const mine = ++generation;
    for (const a of document.querySelectorAll("nav a")) {
      const active = a.dataset.nav === route.page || a.dataset.nav + "" === { topic: "topics", group: "groups" }[route.page];
      if (active) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    }
    main.setAttribute("aria-busy", "true");
    main.removeAttribute("data-loaded");
    let content;
    try {
      const fn = pages[route.page];
      content = fn ? await fn(route) : [h("h1", { tabindex: -1 }, "Not found"), h("p", {}, "No page " + route.page)];
    } catch (e) {
      content = [h("h1", { tabindex: -1 }, "Error"), h("p", { class: "error", role: "alert" }, e.message)];
    }
    if (mine !== generation) return;
    main.replaceChildren(...content.filter((c) => c));
    if (flash) {
      main.querySelector("h1")?.after(h("p", { class: "status", role: "status", id: "flash" }, flash));
      flash = null;
    }
    document.title = (main.querySelector("h1")?.textContent || "") + " - rocketq console";
    main.setAttribute("aria-busy", "false");
    main.setAttribute("data-loaded", route.page);
    if (render.moved) main.querySelector("h1")?.focus();
    render.moved = true;
  }
  render.moved = false;
  window.addEventListener("hashchange", render);
  render();
})();
