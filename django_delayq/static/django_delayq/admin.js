"use strict";
// django-delayq admin: "select every job on this page". Everything also works without it.
document.addEventListener("DOMContentLoaded", function () {
    const toggle = document.getElementById("dq-toggle");
    if (!toggle) {
        return;
    }
    const boxes = document.querySelectorAll("input.dq-select");
    toggle.addEventListener("change", function () {
        boxes.forEach(function (box) {
            box.checked = toggle.checked;
            box.closest("tr").classList.toggle("selected", toggle.checked);
        });
    });
    boxes.forEach(function (box) {
        box.addEventListener("change", function () {
            box.closest("tr").classList.toggle("selected", box.checked);
            toggle.checked = Array.from(boxes).every(function (b) { return b.checked; });
        });
    });
});
