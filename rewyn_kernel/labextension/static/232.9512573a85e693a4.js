"use strict";(self.rspackChunkrewyn_kernel=self.rspackChunkrewyn_kernel||[]).push([[232],{15(e,r,t){var n=t(16),a=t.n(n),o=t(17),s=(t.n(o))()(a());s.push([e.id,`/* The sandbox event line (src/view.ts). Colours come from the JupyterLab theme. */
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
`,""]),t.d(r,{},{A:s})},17(e){e.exports=function(e){var r=[];return r.toString=function(){return this.map(function(r){var t="",n=void 0!==r[5];return r[4]&&(t+="@supports (".concat(r[4],") {")),r[2]&&(t+="@media ".concat(r[2]," {")),n&&(t+="@layer".concat(r[5].length>0?" ".concat(r[5]):""," {")),t+=e(r),n&&(t+="}"),r[2]&&(t+="}"),r[4]&&(t+="}"),t}).join("")},r.i=function(e,t,n,a,o){"string"==typeof e&&(e=[[null,e,void 0]]);var s={};if(n)for(var i=0;i<this.length;i++){var c=this[i][0];null!=c&&(s[c]=!0)}for(var p=0;p<e.length;p++){var l=[].concat(e[p]);n&&s[l[0]]||(void 0!==o&&(void 0===l[5]||(l[1]="@layer".concat(l[5].length>0?" ".concat(l[5]):""," {").concat(l[1],"}")),l[5]=o),t&&(l[2]&&(l[1]="@media ".concat(l[2]," {").concat(l[1],"}")),l[2]=t),a&&(l[4]?(l[1]="@supports (".concat(l[4],") {").concat(l[1],"}"),l[4]=a):l[4]="".concat(a)),r.push(l))}},r}},16(e){e.exports=function(e){return e[1]}},9(e){var r=[];function t(e){for(var t=-1,n=0;n<r.length;n++)if(r[n].identifier===e){t=n;break}return t}function n(e,n){for(var a={},o=[],s=0;s<e.length;s++){var i=e[s],c=n.base?i[0]+n.base:i[0],p=a[c]||0,l="".concat(c," ").concat(p);a[c]=p+1;var u=t(l),d={css:i[1],media:i[2],sourceMap:i[3],supports:i[4],layer:i[5]};if(-1!==u)r[u].references++,r[u].updater(d);else{var f=function(e,r){var t=r.domAPI(r);return t.update(e),function(r){r?(r.css!==e.css||r.media!==e.media||r.sourceMap!==e.sourceMap||r.supports!==e.supports||r.layer!==e.layer)&&t.update(e=r):t.remove()}}(d,n);n.byIndex=s,r.splice(s,0,{identifier:l,updater:f,references:1})}o.push(l)}return o}e.exports=function(e,a){var o=n(e=e||[],a=a||{});return function(e){e=e||[];for(var s=0;s<o.length;s++){var i=t(o[s]);r[i].references--}for(var c=n(e,a),p=0;p<o.length;p++){var l=t(o[p]);0===r[l].references&&(r[l].updater(),r.splice(l,1))}o=c}}},11(e){var r={};e.exports=function(e,t){var n=function(e){if(void 0===r[e]){var t=document.querySelector(e);if(window.HTMLIFrameElement&&t instanceof window.HTMLIFrameElement)try{t=t.contentDocument.head}catch(e){t=null}r[e]=t}return r[e]}(e);if(!n)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");n.appendChild(t)}},13(e){e.exports=function(e){var r=document.createElement("style");return e.setAttributes(r,e.attributes),e.insert(r,e.options),r}},12(e,r,t){e.exports=function(e){var r=t.nc;r&&e.setAttribute("nonce",r)}},10(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var r=e.insertStyleElement(e);return{update:function(t){var n,a,o;n="",t.supports&&(n+="@supports (".concat(t.supports,") {")),t.media&&(n+="@media ".concat(t.media," {")),(a=void 0!==t.layer)&&(n+="@layer".concat(t.layer.length>0?" ".concat(t.layer):""," {")),n+=t.css,a&&(n+="}"),t.media&&(n+="}"),t.supports&&(n+="}"),(o=t.sourceMap)&&"u">typeof btoa&&(n+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(o))))," */")),e.styleTagTransform(n,r,e.options)},remove:function(){var e;null===(e=r).parentNode||e.parentNode.removeChild(e)}}}},14(e){e.exports=function(e,r){if(r.styleSheet)r.styleSheet.cssText=e;else{for(;r.firstChild;)r.removeChild(r.firstChild);r.appendChild(document.createTextNode(e))}}},8(e,r,t){var n=t(9),a=t.n(n),o=t(10),s=t.n(o),i=t(11),c=t.n(i),p=t(12),l=t.n(p),u=t(13),d=t.n(u),f=t(14),v=t.n(f),h=t(15),m={};m.styleTagTransform=v(),m.setAttributes=l(),m.insert=c().bind(null,"head"),m.domAPI=s(),m.insertStyleElement=d(),a()(h.A,m),h.A&&h.A.locals&&h.A.locals}}]);