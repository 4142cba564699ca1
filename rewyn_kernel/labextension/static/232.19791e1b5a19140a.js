"use strict";(self.rspackChunkrewyn_kernel=self.rspackChunkrewyn_kernel||[]).push([[232],{17(e,r,n){var t=n(18),a=n.n(t),o=n(19),i=(n.n(o))()(a());i.push([e.id,`/* The sandbox event line (src/view.ts). Colours come from the JupyterLab theme. */
.rewyn-Event {
  font-family: var(--jp-ui-font-family);
  font-size: var(--jp-ui-font-size1);
  color: var(--jp-ui-font-color2);
  padding: 1px 0;
}

.rewyn-Event-line {
  cursor: pointer;
  display: flex;
  flex-wrap: wrap;
  gap: 6px;
  align-items: center;
}

/* Long values wrap inside the output area instead of widening it. */
.rewyn-Event-line > span {
  min-width: 0;
  overflow-wrap: anywhere;
}

.rewyn-Event-status {
  font-weight: 600;
  padding: 0 6px;
  border-radius: var(--jp-border-radius);
  border: 1px solid currentcolor;
}

.rewyn-Event-status[data-tone='ok'] {
  color: var(--jp-success-color1);
}

.rewyn-Event-status[data-tone='warn'] {
  color: var(--jp-warn-color1);
}

.rewyn-Event-status[data-tone='error'] {
  color: var(--jp-error-color1);
}

.rewyn-Event-badge {
  color: var(--jp-warn-color1);
  border: 1px solid var(--jp-warn-color1);
  border-radius: 8px;
  padding: 0 6px;
}

.rewyn-Event-rows {
  display: grid;
  grid-template-columns: max-content 1fr;
  gap: 1px 12px;
  margin: 4px 0 2px 18px;
}

.rewyn-Event-rows dt {
  font-weight: 600;
}

.rewyn-Event-rows dd {
  margin: 0;
  overflow-wrap: anywhere;
}

/* The status line under a cell (src/status.ts), aligned with the cell's input. */
.rewyn-CellStatus {
  padding-left: calc(var(--jp-cell-prompt-width, 64px) + var(--jp-cell-padding, 5px));
}

/* Under the status line: an undo of the cell's changes to the state (src/undo.ts). */
.rewyn-CellStatus-undo {
  display: block;
  font-family: var(--jp-ui-font-family);
  font-size: var(--jp-ui-font-size1);
  color: var(--jp-ui-font-color2);
  font-style: italic;
}

/* The banner on a cell an MCP agent wrote (src/agent.ts), above the cell's input. */
.rewyn-AgentBanner {
  display: flex;
  flex-wrap: wrap;
  align-items: center;
  gap: 4px 8px;
  margin-left: calc(var(--jp-cell-prompt-width, 64px) + var(--jp-cell-padding, 5px));
  padding: 2px 6px;
  font-family: var(--jp-ui-font-family);
  font-size: var(--jp-ui-font-size1);
  color: var(--jp-ui-font-color1);
  border-left: 3px solid var(--jp-brand-color1);
  background: var(--jp-layout-color2);
}

.rewyn-AgentBanner[data-state='pending'] {
  border-left-color: var(--jp-warn-color1);
}

.rewyn-AgentBanner[data-state='rejected'],
.rewyn-AgentBanner[data-state='expired'] {
  border-left-color: var(--jp-error-color1);
}

.rewyn-AgentBanner-label {
  font-weight: 600;
}

/* Text the agent chose stays in its own box: it cannot reorder the words around it. */
.rewyn-AgentBanner-name,
.rewyn-AgentBanner-reason,
.rewyn-AgentBanner-note {
  unicode-bidi: isolate;
  overflow-wrap: anywhere;
}

.rewyn-AgentBanner-text {
  min-width: 0;
  flex: 1 1 20em;
  white-space: pre-wrap;
}

.rewyn-AgentBanner-risk {
  font-weight: 600;
}

.rewyn-AgentBanner-risk[data-risk='medium'] {
  color: var(--jp-warn-color1);
}

.rewyn-AgentBanner-risk[data-risk='high'] {
  color: var(--jp-error-color1);
}

.rewyn-AgentBanner-actions {
  display: flex;
  gap: 6px;
}

.rewyn-AgentBanner-actions > button {
  font-family: var(--jp-ui-font-family);
  font-size: var(--jp-ui-font-size1);
  color: var(--jp-ui-font-color1);
  background: var(--jp-layout-color1);
  border: 1px solid var(--jp-border-color1);
  border-radius: var(--jp-border-radius);
  padding: 1px 10px;
  cursor: pointer;
}

.rewyn-AgentBanner-actions > .rewyn-AgentRun {
  color: var(--jp-ui-inverse-font-color1);
  background: var(--jp-brand-color1);
  border-color: var(--jp-brand-color1);
}

.rewyn-AgentBanner-actions > button:disabled {
  opacity: 0.5;
  cursor: default;
}

.rewyn-CellStatus-grant {
  margin: 2px 6px 2px 0;
  font-family: var(--jp-ui-font-family);
  font-size: var(--jp-ui-font-size1);
}
`,""]),n.d(r,{},{A:i})},19(e){e.exports=function(e){var r=[];return r.toString=function(){return this.map(function(r){var n="",t=void 0!==r[5];return r[4]&&(n+="@supports (".concat(r[4],") {")),r[2]&&(n+="@media ".concat(r[2]," {")),t&&(n+="@layer".concat(r[5].length>0?" ".concat(r[5]):""," {")),n+=e(r),t&&(n+="}"),r[2]&&(n+="}"),r[4]&&(n+="}"),n}).join("")},r.i=function(e,n,t,a,o){"string"==typeof e&&(e=[[null,e,void 0]]);var i={};if(t)for(var s=0;s<this.length;s++){var l=this[s][0];null!=l&&(i[l]=!0)}for(var c=0;c<e.length;c++){var p=[].concat(e[c]);t&&i[p[0]]||(void 0!==o&&(void 0===p[5]||(p[1]="@layer".concat(p[5].length>0?" ".concat(p[5]):""," {").concat(p[1],"}")),p[5]=o),n&&(p[2]&&(p[1]="@media ".concat(p[2]," {").concat(p[1],"}")),p[2]=n),a&&(p[4]?(p[1]="@supports (".concat(p[4],") {").concat(p[1],"}"),p[4]=a):p[4]="".concat(a)),r.push(p))}},r}},18(e){e.exports=function(e){return e[1]}},11(e){var r=[];function n(e){for(var n=-1,t=0;t<r.length;t++)if(r[t].identifier===e){n=t;break}return n}function t(e,t){for(var a={},o=[],i=0;i<e.length;i++){var s=e[i],l=t.base?s[0]+t.base:s[0],c=a[l]||0,p="".concat(l," ").concat(c);a[l]=c+1;var d=n(p),u={css:s[1],media:s[2],sourceMap:s[3],supports:s[4],layer:s[5]};if(-1!==d)r[d].references++,r[d].updater(u);else{var f=function(e,r){var n=r.domAPI(r);return n.update(e),function(r){r?(r.css!==e.css||r.media!==e.media||r.sourceMap!==e.sourceMap||r.supports!==e.supports||r.layer!==e.layer)&&n.update(e=r):n.remove()}}(u,t);t.byIndex=i,r.splice(i,0,{identifier:p,updater:f,references:1})}o.push(p)}return o}e.exports=function(e,a){var o=t(e=e||[],a=a||{});return function(e){e=e||[];for(var i=0;i<o.length;i++){var s=n(o[i]);r[s].references--}for(var l=t(e,a),c=0;c<o.length;c++){var p=n(o[c]);0===r[p].references&&(r[p].updater(),r.splice(p,1))}o=l}}},13(e){var r={};e.exports=function(e,n){var t=function(e){if(void 0===r[e]){var n=document.querySelector(e);if(window.HTMLIFrameElement&&n instanceof window.HTMLIFrameElement)try{n=n.contentDocument.head}catch(e){n=null}r[e]=n}return r[e]}(e);if(!t)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");t.appendChild(n)}},15(e){e.exports=function(e){var r=document.createElement("style");return e.setAttributes(r,e.attributes),e.insert(r,e.options),r}},14(e,r,n){e.exports=function(e){var r=n.nc;r&&e.setAttribute("nonce",r)}},12(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var r=e.insertStyleElement(e);return{update:function(n){var t,a,o;t="",n.supports&&(t+="@supports (".concat(n.supports,") {")),n.media&&(t+="@media ".concat(n.media," {")),(a=void 0!==n.layer)&&(t+="@layer".concat(n.layer.length>0?" ".concat(n.layer):""," {")),t+=n.css,a&&(t+="}"),n.media&&(t+="}"),n.supports&&(t+="}"),(o=n.sourceMap)&&"u">typeof btoa&&(t+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(o))))," */")),e.styleTagTransform(t,r,e.options)},remove:function(){var e;null===(e=r).parentNode||e.parentNode.removeChild(e)}}}},16(e){e.exports=function(e,r){if(r.styleSheet)r.styleSheet.cssText=e;else{for(;r.firstChild;)r.removeChild(r.firstChild);r.appendChild(document.createTextNode(e))}}},10(e,r,n){var t=n(11),a=n.n(t),o=n(12),i=n.n(o),s=n(13),l=n.n(s),c=n(14),p=n.n(c),d=n(15),u=n.n(d),f=n(16),v=n.n(f),y=n(17),w={};w.styleTagTransform=v(),w.setAttributes=p(),w.insert=l().bind(null,"head"),w.domAPI=i(),w.insertStyleElement=u(),a()(y.A,w),y.A&&y.A.locals&&y.A.locals}}]);