from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from shop.jobs import jobs
from shop.models import Customer


@csrf_exempt
@require_POST
def signup(request: HttpRequest) -> JsonResponse:
    email = request.POST["email"]
    with transaction.atomic():
        customer = Customer.objects.create(email=email)
        job = jobs.enqueue("email.welcome", {"email": email})  # commits with the customer
        if email.endswith("@blocked.example"):
            raise ValueError("blocked domain")  # rolls back the customer and the job
    return JsonResponse({"customer": customer.pk, "job": int(job)}, status=201)
