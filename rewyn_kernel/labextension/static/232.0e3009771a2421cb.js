"use strict";(self.rspackChunkrewyn_kernel=self.rspackChunkrewyn_kernel||[]).push([[232],{17(e,t,r){var n=r(18),o=r.n(n),a=r(19),s=(r.n(a))()(o());s.push([e.id,`/* The sandbox event line (src/view.ts). Colours come from the JupyterLab theme. */
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
`,""]),r.d(t,{},{A:s})},19(e){e.exports=function(e){var t=[];return t.toString=function(){return this.map(function(t){var r="",n=void 0!==t[5];return t[4]&&(r+="@supports (".concat(t[4],") {")),t[2]&&(r+="@media ".concat(t[2]," {")),n&&(r+="@layer".concat(t[5].length>0?" ".concat(t[5]):""," {")),r+=e(t),n&&(r+="}"),t[2]&&(r+="}"),t[4]&&(r+="}"),r}).join("")},t.i=function(e,r,n,o,a){"string"==typeof e&&(e=[[null,e,void 0]]);var s={};if(n)for(var i=0;i<this.length;i++){var c=this[i][0];null!=c&&(s[c]=!0)}for(var l=0;l<e.length;l++){var p=[].concat(e[l]);n&&s[p[0]]||(void 0!==a&&(void 0===p[5]||(p[1]="@layer".concat(p[5].length>0?" ".concat(p[5]):""," {").concat(p[1],"}")),p[5]=a),r&&(p[2]&&(p[1]="@media ".concat(p[2]," {").concat(p[1],"}")),p[2]=r),o&&(p[4]?(p[1]="@supports (".concat(p[4],") {").concat(p[1],"}"),p[4]=o):p[4]="".concat(o)),t.push(p))}},t}},18(e){e.exports=function(e){return e[1]}},11(e){var t=[];function r(e){for(var r=-1,n=0;n<t.length;n++)if(t[n].identifier===e){r=n;break}return r}function n(e,n){for(var o={},a=[],s=0;s<e.length;s++){var i=e[s],c=n.base?i[0]+n.base:i[0],l=o[c]||0,p="".concat(c," ").concat(l);o[c]=l+1;var u=r(p),d={css:i[1],media:i[2],sourceMap:i[3],supports:i[4],layer:i[5]};if(-1!==u)t[u].references++,t[u].updater(d);else{var f=function(e,t){var r=t.domAPI(t);return r.update(e),function(t){t?(t.css!==e.css||t.media!==e.media||t.sourceMap!==e.sourceMap||t.supports!==e.supports||t.layer!==e.layer)&&r.update(e=t):r.remove()}}(d,n);n.byIndex=s,t.splice(s,0,{identifier:p,updater:f,references:1})}a.push(p)}return a}e.exports=function(e,o){var a=n(e=e||[],o=o||{});return function(e){e=e||[];for(var s=0;s<a.length;s++){var i=r(a[s]);t[i].references--}for(var c=n(e,o),l=0;l<a.length;l++){var p=r(a[l]);0===t[p].references&&(t[p].updater(),t.splice(p,1))}a=c}}},13(e){var t={};e.exports=function(e,r){var n=function(e){if(void 0===t[e]){var r=document.querySelector(e);if(window.HTMLIFrameElement&&r instanceof window.HTMLIFrameElement)try{r=r.contentDocument.head}catch(e){r=null}t[e]=r}return t[e]}(e);if(!n)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");n.appendChild(r)}},15(e){e.exports=function(e){var t=document.createElement("style");return e.setAttributes(t,e.attributes),e.insert(t,e.options),t}},14(e,t,r){e.exports=function(e){var t=r.nc;t&&e.setAttribute("nonce",t)}},12(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var t=e.insertStyleElement(e);return{update:function(r){var n,o,a;n="",r.supports&&(n+="@supports (".concat(r.supports,") {")),r.media&&(n+="@media ".concat(r.media," {")),(o=void 0!==r.layer)&&(n+="@layer".concat(r.layer.length>0?" ".concat(r.layer):""," {")),n+=r.css,o&&(n+="}"),r.media&&(n+="}"),r.supports&&(n+="}"),(a=r.sourceMap)&&"u">typeof btoa&&(n+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(a))))," */")),e.styleTagTransform(n,t,e.options)},remove:function(){var e;null===(e=t).parentNode||e.parentNode.removeChild(e)}}}},16(e){e.exports=function(e,t){if(t.styleSheet)t.styleSheet.cssText=e;else{for(;t.firstChild;)t.removeChild(t.firstChild);t.appendChild(document.createTextNode(e))}}},10(e,t,r){var n=r(11),o=r.n(n),a=r(12),s=r.n(a),i=r(13),c=r.n(i),l=r(14),p=r.n(l),u=r(15),d=r.n(u),f=r(16),v=r.n(f),h=r(17),y={};y.styleTagTransform=v(),y.setAttributes=p(),y.insert=c().bind(null,"head"),y.domAPI=s(),y.insertStyleElement=d(),o()(h.A,y),h.A&&h.A.locals&&h.A.locals}}]);